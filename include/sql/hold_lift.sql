-- Lift one active hold and return it (no row: unknown, or already lifted). The hold
-- row stays, as evidence, until audit_days after it was lifted. Locks that row.
UPDATE retention.holds
SET lifted_by = %(lifted_by)s, lifted_at = now(), lift_reason = %(reason)s
WHERE hold_id = %(hold_id)s AND lifted_at IS NULL
RETURNING hold_id, policy, match, value, reason, placed_by, placed_at,
          lifted_by, lifted_at, lift_reason
