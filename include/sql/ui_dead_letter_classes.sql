-- The Retention view: the failure classes of dead operations (with how many of
-- each) of the policies a user may read, for the dead-letter filter. Read-only.
SELECT policy, failure_class, count(*) AS n
FROM retention.dead_operations
WHERE policy = ANY(%(policies)s::text[])
GROUP BY policy, failure_class
ORDER BY policy, failure_class
