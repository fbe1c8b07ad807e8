-- The active holds keeping each of a batch of operations' objects: by the row key,
-- the tenant or the object id the operation was made for, of its policy or of every
-- policy. A tenant or object hold is read through the policy's table's column type
-- ({tenant_held_value}, {object_held_value}: retention.hold_value_as, migration 0026),
-- as the ledger keeps the column's text and an every-policy hold is kept as given. Read
-- by the screen just before the calls. Read-only; one probe of holds_active per
-- operation and match.
SELECT c.c_position AS position, h.hold_id, h.policy, h.match, h.value, h.reason,
       h.placed_by, h.placed_at, h.lifted_by, h.lifted_at, h.lift_reason
FROM unnest(%(row_keys)s::bigint[], %(tenants)s::text[], %(object_ids)s::text[])
     WITH ORDINALITY AS c(c_key, c_tenant, c_object, c_position)
JOIN retention.holds AS h
  ON h.lifted_at IS NULL
 AND (h.policy IS NULL OR h.policy = %(hold_policy)s)
 AND ((h.match = 'key' AND h.value = c.c_key::text)
      OR (h.match = 'tenant' AND {tenant_held_value} = c.c_tenant)
      OR (h.match = 'object' AND {object_held_value} = c.c_object))
ORDER BY c.c_position, h.hold_id
