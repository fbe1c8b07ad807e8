-- The indexes of a schema's tables for the schema snapshot, except those a primary
-- key, unique or exclusion constraint made (the constraint shows them). Catalog only.
SELECT t.relname AS table_name,
       i.relname AS name,
       pg_get_indexdef(i.oid) AS definition
FROM pg_index AS x
JOIN pg_class AS i ON i.oid = x.indexrelid
JOIN pg_class AS t ON t.oid = x.indrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
WHERE n.nspname = %(schema)s
  AND NOT EXISTS (
      SELECT 1 FROM pg_constraint AS con
      WHERE con.conindid = x.indexrelid AND con.contype IN ('p', 'u', 'x')
  )
ORDER BY t.relname COLLATE "C", i.relname COLLATE "C"
