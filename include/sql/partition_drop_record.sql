-- Record what one run decided for one expired partition, before any DDL: 'started'
-- (action 'drop' or 'detach', about to be detached) or 'left' (action 'rows': left
-- to the row path, reason says why). A retry of the run overwrites its own record.
-- Touches one row of retention.partition_drops.
INSERT INTO retention.partition_drops AS d (
    policy, run_id, partition_name, table_oid, bounds, estimated_rows, action, state, reason
) VALUES (
    %(policy)s, %(run_id)s, %(partition_name)s, %(table_oid)s, %(bounds)s, %(estimated_rows)s,
    %(action)s, %(state)s, %(reason)s
)
ON CONFLICT (policy, run_id, partition_name) DO UPDATE
SET table_oid = excluded.table_oid,
    bounds = excluded.bounds,
    estimated_rows = excluded.estimated_rows,
    action = excluded.action,
    state = excluded.state,
    reason = excluded.reason,
    last_error = NULL,
    resolved_by_run = NULL,
    started_at = now(),
    finished_at = CASE WHEN excluded.state = 'started' THEN NULL ELSE now() END
