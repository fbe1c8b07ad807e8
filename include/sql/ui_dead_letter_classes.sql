-- The Retention view: the failure classes of dead operations and dead events
-- (with how many of each) of the policies a user may read, for the dead-letter
-- filter. Read-only.
SELECT 'operations' AS kind, policy, failure_class, count(*) AS n
FROM retention.dead_operations
WHERE policy = ANY(%(policies)s::text[])
GROUP BY policy, failure_class
UNION ALL
SELECT 'events' AS kind, policy, failure_class, count(*) AS n
FROM retention.dead_events
WHERE policy = ANY(%(policies)s::text[])
GROUP BY policy, failure_class
ORDER BY kind DESC, policy, failure_class
