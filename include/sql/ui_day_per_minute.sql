-- The Retention view: per minute over the last 24 hours (oldest first, 1440
-- minutes, the current one last), the deletions of a policy, the 429 answers its
-- API gave, and its queue age. A remote policy's deletions are confirmed
-- operations (done_at); a row policy's are the rows of windows that finished in
-- that minute. Queue age at a minute: how long the oldest operation created by
-- then and not yet finished (done, or dead) by then had waited; NULL when none
-- waited. Read-only.
--
-- Queue age without a row per minute per operation: ordered by created_at, an
-- operation is the oldest waiting one from the moment it was created and every
-- older one had finished (the running maximum of the older ones' ends) until its
-- own end; those spans do not overlap, so each minute falls in at most one. Only
-- operations that finished inside the 24 hours, or have not, can be the oldest
-- waiting one at a minute of them.
WITH minutes AS (
    SELECT generate_series(date_trunc('minute', now()) - interval '1439 minutes',
                           date_trunc('minute', now()), interval '1 minute') AS minute
),
confirmed AS (
    SELECT date_trunc('minute', done_at) AS minute, count(*) AS n
    FROM retention.operations
    WHERE %(remote)s AND policy = %(policy)s AND state = 'done'
      AND done_at >= date_trunc('minute', now()) - interval '1439 minutes'
    GROUP BY 1
),
rows_deleted AS (
    SELECT date_trunc('minute', finished_at) AS minute, sum(rows_deleted) AS n
    FROM retention.windows
    WHERE NOT %(remote)s AND policy = %(policy)s
      AND finished_at >= date_trunc('minute', now()) - interval '1439 minutes'
    GROUP BY 1
),
rate_limited AS (
    SELECT date_trunc('minute', finished_at) AS minute, count(*) AS n
    FROM retention.attempts
    WHERE policy = %(policy)s AND status_code = 429
      AND finished_at >= date_trunc('minute', now()) - interval '1439 minutes'
    GROUP BY 1
),
waited AS (
    SELECT created_at,
           CASE state WHEN 'done' THEN done_at WHEN 'dead' THEN updated_at END AS ended_at
    FROM retention.operations
    WHERE %(remote)s AND policy = %(policy)s
      AND (state IN ('pending', 'in_flight')
           OR (state = 'done' AND done_at >= date_trunc('minute', now()) - interval '1439 minutes')
           OR (state = 'dead'
               AND updated_at >= date_trunc('minute', now()) - interval '1439 minutes'))
),
oldest_spans AS (
    SELECT created_at,
           greatest(created_at,
                    coalesce(max(coalesce(ended_at, 'infinity')) OVER (
                        ORDER BY created_at ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                        '-infinity')) AS oldest_from,
           coalesce(ended_at, 'infinity') AS oldest_until
    FROM waited
),
queue_age AS (
    -- each span's minutes inside the 24 hours: at most 1440 rows in all
    SELECT g.minute, extract(epoch FROM g.minute - s.created_at) AS seconds
    FROM oldest_spans AS s
    CROSS JOIN LATERAL generate_series(
        greatest(date_trunc('minute', now()) - interval '1439 minutes',
                 date_trunc('minute', s.oldest_from + interval '1 minute'
                                      - interval '1 microsecond')),
        least(date_trunc('minute', now()), s.oldest_until - interval '1 microsecond'),
        interval '1 minute') AS g(minute)
    WHERE s.oldest_from < s.oldest_until
)
SELECT m.minute,
       coalesce(c.n, 0) + coalesce(r.n, 0) AS deletions,
       coalesce(l.n, 0) AS rate_limited,
       q.seconds AS queue_age_seconds
FROM minutes AS m
LEFT JOIN confirmed AS c USING (minute)
LEFT JOIN rows_deleted AS r USING (minute)
LEFT JOIN rate_limited AS l USING (minute)
LEFT JOIN queue_age AS q USING (minute)
ORDER BY m.minute
