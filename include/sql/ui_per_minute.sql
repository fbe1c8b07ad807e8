-- The Retention view: per minute over the last hour (oldest first, 60 minutes,
-- the current one last), the deletions of a policy and the 429 answers its API
-- gave. A remote policy's deletions are confirmed operations (done_at); a row
-- policy's are the rows of windows that finished in that minute. Read-only.
WITH minutes AS (
    SELECT generate_series(date_trunc('minute', now()) - interval '59 minutes',
                           date_trunc('minute', now()), interval '1 minute') AS minute
),
confirmed AS (
    SELECT date_trunc('minute', done_at) AS minute, count(*) AS n
    FROM retention.operations
    WHERE %(remote)s AND policy = %(policy)s AND state = 'done'
      AND done_at >= date_trunc('minute', now()) - interval '59 minutes'
    GROUP BY 1
),
rows_deleted AS (
    SELECT date_trunc('minute', finished_at) AS minute, sum(rows_deleted) AS n
    FROM retention.windows
    WHERE NOT %(remote)s AND policy = %(policy)s
      AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'
    GROUP BY 1
),
rate_limited AS (
    SELECT date_trunc('minute', finished_at) AS minute, count(*) AS n
    FROM retention.attempts
    WHERE policy = %(policy)s AND status_code = 429
      AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'
    GROUP BY 1
)
SELECT m.minute,
       coalesce(c.n, 0) + coalesce(r.n, 0) AS deletions,
       coalesce(l.n, 0) AS rate_limited
FROM minutes AS m
LEFT JOIN confirmed AS c USING (minute)
LEFT JOIN rows_deleted AS r USING (minute)
LEFT JOIN rate_limited AS l USING (minute)
ORDER BY m.minute
