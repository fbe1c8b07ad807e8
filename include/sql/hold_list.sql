-- Holds, newest first: of one policy (and every-policy holds) or all, active only
-- or lifted ones too. Read-only.
SELECT hold_id, policy, match, value, reason, placed_by, placed_at,
       lifted_by, lifted_at, lift_reason
FROM retention.holds
WHERE (%(policy)s::text IS NULL OR policy IS NULL OR policy = %(policy)s)
  AND (%(include_lifted)s OR lifted_at IS NULL)
ORDER BY placed_at DESC, hold_id DESC
LIMIT %(limit)s
