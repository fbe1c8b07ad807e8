-- The Retention view: the failure classes of dead operations awaiting review, of
-- dead events, and of dead operations reviewed and discarded (retention.discards),
-- with how many of each, of the policies a user may read, for the dead-letter
-- filter. Read-only.
SELECT CASE WHEN discarded THEN 'discarded' ELSE 'operations' END AS kind, policy,
       failure_class, count(*) AS n
FROM (SELECT o.policy, o.failure_class,
             EXISTS (SELECT 1 FROM retention.discards AS d
                     WHERE d.operation_key = o.operation_key
                       AND d.dead_since = o.dead_since) AS discarded
      FROM retention.dead_operations AS o
      WHERE o.policy = ANY(%(policies)s::text[])) AS dead
GROUP BY 1, policy, failure_class
UNION ALL
SELECT 'events' AS kind, policy, failure_class, count(*) AS n
FROM retention.dead_events
WHERE policy = ANY(%(policies)s::text[])
GROUP BY policy, failure_class
ORDER BY kind DESC, policy, failure_class
