-- The tables of a schema, by name, for the schema snapshot (include/sql/schema.sql):
-- unlogged or not, and the partition key of a partitioned one. Catalog only.
SELECT c.relname AS name,
       c.relpersistence = 'u' AS unlogged,
       pg_get_partkeydef(c.oid) AS partition_key
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s
  AND c.relkind IN ('r', 'p')
ORDER BY c.relname COLLATE "C"
