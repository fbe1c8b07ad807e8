-- What a run that stopped before its reconcile (a SIGTERM, or a DAG run that ended
-- without it) did so far, for its partial summary and for run_status to decide on:
-- its plan's windows by state (how many still run), the rows they deleted and
-- counted, what its drain passes deleted, and the moment of the stop. Run after
-- run_stopped_lock.sql locked the run's row, in the same transaction: this statement
-- starts after the lock was granted, so two windows stopping at once record in turn
-- and the later one reads the windows, drain passes and status the earlier one left.
-- The cutoff and the moment of the stop come as Postgres writes them into JSON
-- (to_jsonb: "2026-01-01T00:00:00.12+00:00", no trailing zeros in the fraction), the
-- text retention.runs.summary has always stored; stopped_at stays a timestamptz for
-- the run's finished_at. Reads one row of retention.runs and its plan's windows
-- (windows_policy_plan).
SELECT r.policy, r.dag_id, r.run_id, r.plan_id, r.table_name, r.status, r.dry_run,
       to_jsonb(r.cutoff) #>> '{{}}' AS cutoff_json,
       r.rows_planned, now() AS stopped_at,
       to_jsonb(now()) #>> '{{}}' AS stopped_at_json,
       w.by_state AS windows_by_state,
       w.running::bigint AS windows_running,
       w.rows_deleted::bigint AS rows_deleted_by_windows,
       w.rows_counted::bigint AS rows_counted,
       d.rows_deleted::bigint AS rows_deleted_by_drain
FROM retention.runs AS r
CROSS JOIN LATERAL (
    SELECT coalesce(sum(n) FILTER (WHERE state = 'running'), 0) AS running,
           coalesce(sum(deleted), 0) AS rows_deleted,
           sum(counted) AS rows_counted,
           coalesce(jsonb_object_agg(state, n), jsonb_build_object()) AS by_state
    FROM (
        SELECT state, count(*) AS n, sum(rows_deleted) AS deleted, sum(rows_counted) AS counted
        FROM retention.windows
        WHERE policy = r.policy AND plan_id = r.plan_id
        GROUP BY state
    ) AS by_state
) AS w
CROSS JOIN LATERAL (
    SELECT coalesce(sum((pass ->> 'rows_deleted')::bigint), 0) AS rows_deleted
    FROM jsonb_array_elements(coalesce(r.drain, jsonb_build_array())) AS pass
) AS d
WHERE r.policy = %(policy)s
  AND r.run_id = %(run_id)s
  AND r.status IN ('planned', 'cancelled')
