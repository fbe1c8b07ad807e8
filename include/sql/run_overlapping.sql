-- Other runs of a policy whose windows worked while this run was under way (since
-- its planning): with the run lease there are none, unless a cleared task of an
-- old run ran or a lease was taken over. Read-only; at most 10 runs.
SELECT run_id,
       count(*) AS windows,
       sum(rows_deleted) AS rows_deleted,
       min(started_at) AS first_started,
       max(finished_at) AS last_finished
FROM retention.windows
WHERE policy = %(policy)s
  AND run_id <> %(run_id)s
  AND started_at IS NOT NULL
  AND coalesce(finished_at, now()) >= %(since)s
GROUP BY run_id
ORDER BY min(started_at)
LIMIT 10
