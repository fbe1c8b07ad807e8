-- The Retention view's runs of one policy: the latest real run by logical date (a
-- backfill of an old date is not the current state, even when it finished last), the
-- real run that finished last, and the latest dry run (shown apart: it deleted
-- nothing). A run without a logical date (a manual run) counts from when it was
-- planned. Each row says which of the three it is, with the columns of run_recent.sql
-- (with the summary whole: Python reads its covered_by note, its
-- rate_limit_headers_note and what bounded its drain through RunSummary). Read-only;
-- runs by policy (its primary key), then each plan's windows (windows_policy_plan) and
-- one run_leases row.
WITH picks AS (
    SELECT (SELECT run_id FROM retention.runs
            WHERE policy = %(policy)s AND NOT dry_run
            ORDER BY coalesce(logical_date, planned_at) DESC, planned_at DESC
            LIMIT 1) AS latest,
           (SELECT run_id FROM retention.runs
            WHERE policy = %(policy)s AND NOT dry_run AND finished_at IS NOT NULL
            ORDER BY finished_at DESC
            LIMIT 1) AS last_finished,
           (SELECT run_id FROM retention.runs
            WHERE policy = %(policy)s AND dry_run
            ORDER BY coalesce(logical_date, planned_at) DESC, planned_at DESC
            LIMIT 1) AS latest_dry
)
SELECT r.run_id, r.dag_id, r.status, r.dry_run, r.cutoff, r.rows_deleted, r.rows_remaining,
       r.logical_date, r.planned_at, r.finished_at,
       extract(epoch FROM r.finished_at - r.planned_at) AS duration_seconds,
       (SELECT coalesce(jsonb_object_agg(state, n), jsonb_build_object())
        FROM (SELECT state, count(*) AS n FROM retention.windows AS w
              WHERE w.policy = r.policy AND w.plan_id = r.plan_id
              GROUP BY state) AS by_state) AS windows_by_state,
       (SELECT coalesce(sum(w.rows_deleted), 0) FROM retention.windows AS w
        WHERE w.policy = r.policy AND w.plan_id = r.plan_id) AS rows_deleted_so_far,
       lease.run_id AS lease_holder,
       lease.taken_at AS lease_taken_at,
       r.summary,
       r.run_id IS NOT DISTINCT FROM p.latest AS is_latest,
       r.run_id IS NOT DISTINCT FROM p.last_finished AS is_last_finished,
       r.run_id IS NOT DISTINCT FROM p.latest_dry AS is_latest_dry
FROM picks AS p
JOIN retention.runs AS r
  ON r.policy = %(policy)s AND r.run_id IN (p.latest, p.last_finished, p.latest_dry)
LEFT JOIN retention.run_leases AS lease ON lease.policy = r.policy
