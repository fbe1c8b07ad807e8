-- The partitions of a policy's table whose DETACH ... CONCURRENTLY is pending
-- (pg_inherits.inhdetachpending: its first step committed, the second never
-- finished). Their rows are no longer seen through the table, so reconcile makes
-- the run dirty and names them while any is pending, whoever began the detach.
-- Reads the catalog only.
SELECT format('%%I.%%I', n.nspname, c.relname) AS partition_name, c.oid AS table_oid
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE i.inhparent = to_regclass(format('%%I.%%I', %(schema)s::text, %(table)s::text))
  AND i.inhdetachpending
ORDER BY 1
