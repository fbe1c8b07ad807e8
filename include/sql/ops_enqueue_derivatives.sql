-- Record one operation per derivative (remote.derivatives) of each named object
-- operation, keyed sha256(object key|resource), beside it: same row, object,
-- tenant, version and window, due when it is. Re-enqueueing is a no-op; a
-- derivative already pending only becomes due sooner and joins the object's
-- window, as the object's own operation does in ops_enqueue.sql. An object whose
-- operation is dead gets none (its row stays anyway).
-- Inserts into retention.operations only; reads the named operations.
INSERT INTO retention.operations (
    operation_key, parent_key, resource, policy, policy_revision, table_name, row_key,
    object_id, tenant, version, window_key, state, not_before
)
SELECT encode(sha256(convert_to(o.operation_key || '|' || r.resource, 'UTF8')), 'hex'),
       o.operation_key, r.resource, o.policy, o.policy_revision, o.table_name, o.row_key,
       o.object_id, o.tenant, o.version, o.window_key, 'pending', o.not_before
FROM retention.operations AS o
CROSS JOIN unnest(%(resources)s::text[]) AS r(resource)
WHERE o.operation_key = ANY(%(keys)s::text[])
  AND o.parent_key IS NULL
  AND o.state <> 'dead'
ON CONFLICT (operation_key) DO UPDATE
SET not_before = least(retention.operations.not_before, excluded.not_before),
    window_key = coalesce(retention.operations.window_key, excluded.window_key),
    updated_at = now()
WHERE retention.operations.state = 'pending'
  AND (retention.operations.not_before > excluded.not_before
       OR retention.operations.window_key IS DISTINCT FROM
          coalesce(retention.operations.window_key, excluded.window_key))
