-- Erasures, newest first (optionally of one policy, optionally only unfinished ones,
-- with those that failed since failed_since when it is given): the Retention view, the
-- CLI and the late-erasure alert read them. Read-only.
SELECT *, (state IN ('requested', 'running') AND deadline < now()) AS late
FROM retention.erasures
WHERE (%(policy)s::text IS NULL OR policy = %(policy)s)
  AND (NOT %(open_only)s OR state IN ('requested', 'running')
       OR (state = 'failed' AND finished_at >= %(failed_since)s::timestamptz))
ORDER BY requested_at DESC, erasure_id DESC
LIMIT %(limit)s
