-- A partial summary for a run that stopped before its reconcile (a SIGTERM, or a DAG
-- run that ended without it): what its windows did so far. The status turns
-- 'cancelled' only once no window of the run is still running (one task marked
-- failed leaves a working run 'planned', with the partial figures). Never
-- overwrites the summary of a reconciled run. Touches one row of retention.runs.
UPDATE retention.runs AS r
SET status = CASE WHEN w.running = 0 THEN 'cancelled' ELSE r.status END,
    finished_at = CASE WHEN w.running = 0 THEN now() END,
    windows = w.windows,
    rows_deleted = w.rows_deleted + d.rows_deleted,
    summary = jsonb_build_object(
        'policy', r.policy,
        'dag_id', r.dag_id,
        'run_id', r.run_id,
        'plan_id', r.plan_id,
        'table', r.table_name,
        'status', CASE WHEN w.running = 0 THEN 'cancelled' ELSE r.status END,
        'partial', true,
        'reason', %(reason)s::text,
        'dry_run', r.dry_run,
        'cutoff', r.cutoff,
        'windows', w.windows,
        'windows_by_state', w.by_state,
        'rows_planned', r.rows_planned,
        'rows_deleted', w.rows_deleted + d.rows_deleted,
        'rows_deleted_by_windows', w.rows_deleted,
        'rows_deleted_by_drain', d.rows_deleted,
        'rows_counted', CASE WHEN r.dry_run THEN w.rows_counted END,
        'stopped_at', now()
    )
FROM (
    SELECT coalesce(sum(n), 0) AS windows,
           coalesce(sum(deleted), 0) AS rows_deleted,
           sum(counted) AS rows_counted,
           coalesce(sum(n) FILTER (WHERE state = 'running'), 0) AS running,
           coalesce(jsonb_object_agg(state, n), jsonb_build_object()) AS by_state
    FROM (
        SELECT state, count(*) AS n, sum(rows_deleted) AS deleted, sum(rows_counted) AS counted
        FROM retention.windows
        WHERE policy = %(policy)s
          AND plan_id = (SELECT plan_id FROM retention.runs
                         WHERE policy = %(policy)s AND run_id = %(run_id)s)
        GROUP BY state
    ) AS by_state
) AS w,
(
    SELECT coalesce(sum((pass ->> 'rows_deleted')::bigint), 0) AS rows_deleted
    FROM retention.runs AS passes,
         jsonb_array_elements(coalesce(passes.drain, jsonb_build_array())) AS pass
    WHERE passes.policy = %(policy)s AND passes.run_id = %(run_id)s
) AS d
WHERE r.policy = %(policy)s
  AND r.run_id = %(run_id)s
  AND r.status IN ('planned', 'cancelled')
RETURNING r.status
