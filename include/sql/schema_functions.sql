-- The functions of a schema, by name and arguments, each as its CREATE statement,
-- for the schema snapshot. Catalog only.
SELECT p.proname AS name,
       pg_get_functiondef(p.oid) AS definition
FROM pg_proc AS p
JOIN pg_namespace AS n ON n.oid = p.pronamespace
WHERE n.nspname = %(schema)s
ORDER BY p.proname COLLATE "C", pg_get_function_identity_arguments(p.oid) COLLATE "C"
