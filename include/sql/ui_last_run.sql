-- The Retention view: a policy's latest run (by when it was planned), with its
-- status, cutoff, rows deleted and remaining, and how long it took. Read-only;
-- one index probe of runs_planned.
SELECT run_id, status, dry_run, cutoff, rows_deleted, rows_remaining, planned_at, finished_at,
       extract(epoch FROM finished_at - planned_at) AS duration_seconds
FROM retention.runs
WHERE policy = %(policy)s
ORDER BY planned_at DESC
LIMIT 1
