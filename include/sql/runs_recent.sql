-- The latest runs (of one policy, or of every policy), newest first: status, cutoff,
-- rows deleted (what the windows deleted so far while a run is still working), rows
-- remaining, windows by state, and whether the run holds its policy's run lease.
-- Read-only; runs_planned, then each plan's windows (windows_policy_plan).
SELECT r.policy, r.run_id, r.status, r.dry_run, r.cutoff, r.planned_at, r.finished_at,
       coalesce(r.rows_deleted,
                (SELECT coalesce(sum(w.rows_deleted), 0) FROM retention.windows AS w
                 WHERE w.policy = r.policy AND w.plan_id = r.plan_id)) AS rows_deleted,
       r.rows_deleted IS NULL AS so_far,
       r.rows_remaining,
       (SELECT coalesce(jsonb_object_agg(state, n), jsonb_build_object())
        FROM (SELECT state, count(*) AS n FROM retention.windows AS w
              WHERE w.policy = r.policy AND w.plan_id = r.plan_id
              GROUP BY state) AS by_state) AS windows_by_state,
       coalesce(lease.run_id = r.run_id, false) AS holds_lease
FROM retention.runs AS r
LEFT JOIN retention.run_leases AS lease ON lease.policy = r.policy
WHERE %(policy)s::text IS NULL OR r.policy = %(policy)s
ORDER BY r.planned_at DESC
LIMIT %(limit)s
