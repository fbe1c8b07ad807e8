-- One hold by id, active or lifted. Read-only.
SELECT hold_id, policy, match, value, reason, placed_by, placed_at,
       lifted_by, lifted_at, lift_reason
FROM retention.holds
WHERE hold_id = %(hold_id)s
