-- The active holds of one policy (or of every policy) matching a tenant, a row key
-- or an object id (any of them may be NULL: that match is not asked). Read-only;
-- one probe of holds_active per match.
SELECT hold_id, policy, match, value, reason, placed_by, placed_at,
       lifted_by, lifted_at, lift_reason
FROM retention.holds
WHERE lifted_at IS NULL
  AND (policy IS NULL OR policy = %(policy)s)
  AND ((match = 'tenant' AND value = %(tenant)s::text)
       OR (match = 'key' AND value = %(key)s::text)
       OR (match = 'object' AND value = %(object_id)s::text))
ORDER BY hold_id
