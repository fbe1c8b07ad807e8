-- The constraints of a schema's tables for the schema snapshot: primary key, unique,
-- foreign keys, checks and exclusions, each as its definition (NOT NULL is a column's).
-- Catalog only.
SELECT c.relname AS table_name,
       con.conname AS name,
       pg_get_constraintdef(con.oid, true) AS definition
FROM pg_constraint AS con
JOIN pg_class AS c ON c.oid = con.conrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s
  AND con.contype IN ('p', 'u', 'f', 'c', 'x')
ORDER BY c.relname COLLATE "C",
         array_position(ARRAY['p', 'u', 'f', 'c', 'x']::"char"[], con.contype),
         con.conname COLLATE "C"
