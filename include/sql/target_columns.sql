-- Every column of a table with its type, in the table's order, to check a policy
-- against the live table (and name the columns that exist when it names one that
-- does not). Reads the catalog only.
SELECT a.attname AS column_name, format_type(a.atttypid, a.atttypmod) AS column_type
FROM pg_attribute AS a
JOIN pg_class AS c ON c.oid = a.attrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s
  AND c.relname = %(table)s
  AND a.attnum > 0
  AND NOT a.attisdropped
ORDER BY a.attnum
