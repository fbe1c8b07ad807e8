-- The policy's row of one confirmed operation, as the column its children reference,
-- only when ops_finish.sql will delete it: the operation is in flight under this owner,
-- and the row is of the version, object and tenant the operation was made for (and,
-- for operations the scan enqueued, still older than its window's cutoff), and, for an
-- object with derivatives, every other resource of it is confirmed, before or by this
-- batch (%(confirmed)s): the condition of ops_finish_ready_resources.sql; and the
-- row is not held (binds %(hold_policy)s): a held row keeps its children. FOR UPDATE
-- holds the row until ops_finish.sql deletes it in the same transaction.
SELECT {column}
FROM {table} AS parent_row,
     (SELECT o.row_key AS op_row_key, o.version AS op_version, o.object_id AS op_object_id,
             o.tenant AS op_tenant,
             (SELECT w.cutoff FROM retention.windows AS w
              WHERE w.window_key = o.window_key) AS op_cutoff
      FROM retention.operations AS o
      WHERE o.operation_key = %(op_key)s
        AND o.lease_owner = %(owner)s
        AND o.state = 'in_flight'
        AND NOT EXISTS (
            SELECT 1 FROM retention.operations AS s
            WHERE (s.operation_key = coalesce(o.parent_key, o.operation_key)
                   OR s.parent_key = coalesce(o.parent_key, o.operation_key))
              AND s.state <> 'done'
              AND s.operation_key <> ALL (%(confirmed)s::text[]))) AS op
WHERE {key} = op.op_row_key
  AND {version_expr} = op.op_version
  AND {object_id}::text = op.op_object_id
  AND {tenant_text} IS NOT DISTINCT FROM op.op_tenant
  AND (op.op_cutoff IS NULL OR {ts} < op.op_cutoff)
  AND NOT {held}
FOR UPDATE OF parent_row
