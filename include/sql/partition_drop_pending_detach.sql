-- The detaches this policy began (a record with the table's oid) that are still
-- pending on the policy's table: a DETACH ... CONCURRENTLY whose second step never
-- finished. The finishing pass finishes them (FINALIZE). One record per table, the
-- latest; the table's name now (it may have been renamed). Reads the catalog and the
-- evidence.
SELECT DISTINCT ON (d.table_oid)
       d.run_id, d.partition_name, d.table_oid, d.action, d.state,
       n.nspname AS schema_now, c.relname AS name_now
FROM retention.partition_drops AS d
JOIN pg_inherits AS i ON i.inhrelid = d.table_oid AND i.inhdetachpending
JOIN pg_class AS c ON c.oid = d.table_oid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE d.policy = %(policy)s
  AND d.action IN ('drop', 'detach')
  AND i.inhparent = to_regclass(format('%%I.%%I', %(schema)s::text, %(table)s::text))
ORDER BY d.table_oid, d.started_at DESC, d.run_id DESC
