-- The views of a schema and their queries, by name, for the schema snapshot.
-- Catalog only.
SELECT c.relname AS name,
       c.relkind = 'm' AS materialized,
       pg_get_viewdef(c.oid, true) AS definition
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s
  AND c.relkind IN ('v', 'm')
ORDER BY c.relname COLLATE "C"
