-- A policy's partitions that were to be dropped and are neither dropped nor given up
-- as something else: detached tables whose drop failed or never ran, detaches still
-- 'started', and drops given up ('abandoned') whose recorded table still exists as a
-- table that is not a partition of anything (its rows are outside the table reconcile
-- counts; once the table is gone, or attached again, it is no longer listed). While
-- any is listed, reconcile makes the run dirty. Reads the catalog and the evidence.
SELECT d.run_id, d.partition_name, d.state, d.reason, d.last_error, d.drop_attempts,
       CASE WHEN c.oid IS NOT NULL THEN format('%%I.%%I', n.nspname, c.relname) END
           AS table_now
FROM retention.partition_drops AS d
LEFT JOIN pg_class AS c ON c.oid = d.table_oid AND c.relkind IN ('r', 'p')
LEFT JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE d.policy = %(policy)s
  AND d.action = 'drop'
  AND (d.state IN ('started', 'detached')
       OR (d.state = 'abandoned' AND c.oid IS NOT NULL AND NOT c.relispartition))
ORDER BY d.started_at, d.partition_name
