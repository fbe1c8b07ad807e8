-- Record the derivative operations (remote.derivatives) that an object operation of the
-- policy not yet done lacks: one made before the derivatives were added to the policy
-- (still pending, in flight, held or replayed from dead), which ops_enqueue.sql does not
-- return, so ops_enqueue_derivatives.sql never ran for it. Keyed, placed and due as
-- ops_enqueue_derivatives.sql makes them; a derivative already there is left alone.
-- Inserts into retention.operations only; reads the policy's object operations.
INSERT INTO retention.operations (
    operation_key, parent_key, resource, policy, policy_revision, table_name, row_key,
    object_id, tenant, version, window_key, state, not_before
)
SELECT d.operation_key, o.operation_key, r.resource, o.policy, o.policy_revision,
       o.table_name, o.row_key, o.object_id, o.tenant, o.version, o.window_key, 'pending',
       o.not_before
FROM retention.operations AS o
CROSS JOIN unnest(%(resources)s::text[]) AS r(resource)
CROSS JOIN LATERAL (
    SELECT encode(sha256(convert_to(o.operation_key || '|' || r.resource, 'UTF8')), 'hex')
        AS operation_key
) AS d
WHERE o.policy = %(policy)s
  AND o.parent_key IS NULL
  AND o.state IN ('pending', 'in_flight', 'held')
  AND NOT EXISTS (SELECT 1 FROM retention.operations AS s
                  WHERE s.operation_key = d.operation_key)
ON CONFLICT (operation_key) DO NOTHING
