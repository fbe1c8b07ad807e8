-- How far a run has come (for the deadline alert): its windows by state and the
-- rows deleted so far, in its latest plan. Read-only.
SELECT r.status, r.dry_run, r.cutoff, r.planned_at, r.rows_planned,
       count(w.window_key) AS windows,
       count(w.window_key) FILTER (WHERE w.state IN ('done', 'counted')) AS windows_done,
       coalesce(sum(w.rows_deleted), 0) AS rows_deleted
FROM retention.runs AS r
LEFT JOIN retention.windows AS w ON w.policy = r.policy AND w.plan_id = r.plan_id
WHERE r.policy = %(policy)s AND r.run_id = %(run_id)s
GROUP BY r.status, r.dry_run, r.cutoff, r.planned_at, r.rows_planned
