-- Make every row of an erasure's scope (a tenant, a row key or an object id), whatever
-- its age (an erasure ignores retain_days), an urgent pending operation due now, under
-- the same operation keys the scheduled scan derives: a routine operation already
-- pending for the row becomes urgent and due now (one ledger row, one remote effect);
-- done, dead and in-flight ones are left alone. {scope_filter} names the scope's column.
-- Upserts rows of retention.operations; reads the table without locks.
INSERT INTO retention.operations (
    operation_key, policy, policy_revision, table_name, row_key, object_id, tenant,
    version, window_key, state, not_before, priority
)
SELECT {operation_key_expr},
       %(policy)s, %(revision)s, %(table_name)s, {key}, {object_id}::text, {tenant_text},
       {version_expr}, NULL, 'pending', now(), 'urgent'
FROM {table}
WHERE {scope_filter}
  AND {object_id} IS NOT NULL
ON CONFLICT (operation_key) DO UPDATE
SET priority = 'urgent',
    not_before = least(retention.operations.not_before, now()),
    updated_at = now()
WHERE retention.operations.state = 'pending'
RETURNING operation_key
