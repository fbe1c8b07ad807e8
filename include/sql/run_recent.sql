-- The latest runs (of one policy, or of every policy), newest first, for `cli runs`:
-- status, cutoff, rows deleted and remaining (both NULL until reconcile), how long it
-- took, the plan's windows by state, the rows its windows deleted so far (while it
-- runs), the run holding the policy's run lease, and its summary whole (NULL until
-- reconcile or a stop; Python reads it through RunSummary: why it deleted nothing when
-- an earlier-finished run had already deleted its rows, the rate-limit headers its
-- limiter ignored). Read-only; runs_planned, then each plan's windows
-- (windows_policy_plan) and one run_leases row.
SELECT r.policy, r.run_id, r.status, r.dry_run, r.cutoff, r.rows_deleted, r.rows_remaining,
       r.planned_at, r.finished_at,
       extract(epoch FROM r.finished_at - r.planned_at) AS duration_seconds,
       (SELECT coalesce(jsonb_object_agg(state, n), jsonb_build_object())
        FROM (SELECT state, count(*) AS n FROM retention.windows AS w
              WHERE w.policy = r.policy AND w.plan_id = r.plan_id
              GROUP BY state) AS by_state) AS windows_by_state,
       (SELECT coalesce(sum(w.rows_deleted), 0) FROM retention.windows AS w
        WHERE w.policy = r.policy AND w.plan_id = r.plan_id) AS rows_deleted_so_far,
       lease.run_id AS lease_holder,
       lease.taken_at AS lease_taken_at,
       r.summary
FROM retention.runs AS r
LEFT JOIN retention.run_leases AS lease ON lease.policy = r.policy
WHERE %(policy)s::text IS NULL OR r.policy = %(policy)s
ORDER BY r.planned_at DESC
LIMIT %(limit)s
