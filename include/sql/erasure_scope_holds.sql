-- The active holds (of this policy or of every policy) that keep a row of an erasure's
-- scope still in the policy's table: a hold on its row key, its tenant or its object id,
-- whatever the scope itself is (a key held inside an erased tenant is named). The
-- erasure's receipt names them. {scope_filter} names the scope's column, {object_text}
-- the row's object id as text (NULL for a policy without remote); a tenant or object
-- hold is read through its column's type ({tenant_held_value}, {object_held_value}), as
-- an every-policy hold is kept as given. Read-only; one pass
-- over the scope's rows per active hold (a handful).
SELECT h.hold_id, h.reason
FROM retention.holds AS h
WHERE h.lifted_at IS NULL
  AND (h.policy IS NULL OR h.policy = %(hold_policy)s)
  AND EXISTS (SELECT 1
              FROM {table}
              WHERE {scope_filter}
                AND ((h.match = 'key' AND {key}::text = h.value)
                     OR (h.match = 'tenant' AND {tenant_text} = {tenant_held_value})
                     OR (h.match = 'object' AND {object_text} = {object_held_value})))
ORDER BY h.hold_id
LIMIT %(limit)s
