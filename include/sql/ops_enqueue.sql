-- Record one intended remote deletion per eligible row in a key range of a window.
-- operation_key = sha256(policy|revision|table|row key|version), so re-enqueueing
-- is a no-op and a restored-then-expired object gets a new key. An operation a
-- hint made pending for later joins the window and becomes due now. Rows without
-- an object id are not enqueued (reconcile reports them as unexplained). Returns
-- the keys it inserted or made due, whose derivatives ops_enqueue_derivatives.sql
-- records beside them (when the policy has any).
-- Inserts into retention.operations only; reads the target table without locks.
INSERT INTO retention.operations (
    operation_key, policy, policy_revision, table_name, row_key, object_id, tenant,
    version, window_key, state, not_before
)
SELECT {operation_key_expr},
       %(policy)s, %(revision)s, %(table_name)s, {key}, {object_id}::text, {tenant_text},
       {version_expr}, %(window_key)s, 'pending', now()
FROM {table}
WHERE {key} > %(after)s
  AND {key} <= %(upto)s
  AND {ts} < %(cutoff)s
  AND {tenant_filter}
  AND {object_id} IS NOT NULL
ON CONFLICT (operation_key) DO UPDATE
SET not_before = least(retention.operations.not_before, excluded.not_before),
    window_key = coalesce(retention.operations.window_key, excluded.window_key),
    updated_at = now()
WHERE retention.operations.state = 'pending'
  AND (retention.operations.window_key IS NULL
       OR retention.operations.not_before > excluded.not_before)
RETURNING operation_key
