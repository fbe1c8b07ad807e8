-- Make hinted objects' deletions pending, due at due_at (or now), under the same
-- operation keys the scheduled scan derives. An operation already pending only
-- becomes due sooner; done, dead and in-flight ones are left alone. Only rows older
-- than the latest cutoff allowed now (now − retain_days) are enqueued. The keys it
-- returns get their derivatives from ops_enqueue_derivatives.sql.
-- Upserts rows of retention.operations; reads the table without locks.
INSERT INTO retention.operations (
    operation_key, policy, policy_revision, table_name, row_key, object_id, tenant,
    version, window_key, state, not_before
)
SELECT {operation_key_expr},
       %(policy)s, %(revision)s, %(table_name)s, {key}, {object_id}::text, {tenant_text},
       {version_expr}, NULL, 'pending', coalesce(hint.hint_due_at, now())
FROM {table}
JOIN unnest(%(keys)s::text[], %(due)s::timestamptz[]) AS hint(hint_object_id, hint_due_at)
  ON {object_id}::text = hint.hint_object_id
WHERE {ts} < %(cutoff)s
ON CONFLICT (operation_key) DO UPDATE
SET not_before = least(retention.operations.not_before, excluded.not_before),
    updated_at = now()
WHERE retention.operations.state = 'pending'
RETURNING operation_key
