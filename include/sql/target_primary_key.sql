-- The columns of a table's primary key, in order (none: no primary key): the parent
-- column a listed child references when no foreign key constraint says so.
-- Reads the catalog only.
SELECT a.attname AS column_name
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON TRUE
JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = k.attnum
WHERE n.nspname = %(schema)s AND c.relname = %(table)s AND i.indisprimary
ORDER BY k.ord
