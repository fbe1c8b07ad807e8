-- Whether one column of a table alone is unique: the key of its primary key or of a
-- valid unique index of that column only (neither partial nor on an expression). A
-- listed child's references: column must be, or a parent's value could name rows of
-- several parents (a code unique per tenant), and their children would go together.
-- Reads the catalog only.
SELECT EXISTS (
    SELECT 1
    FROM pg_index AS i
    JOIN pg_class AS c ON c.oid = i.indrelid
    JOIN pg_namespace AS n ON n.oid = c.relnamespace
    JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = i.indkey[0]
    WHERE n.nspname = %(schema)s AND c.relname = %(table)s
      AND i.indisunique AND i.indisvalid
      AND i.indnkeyatts = 1
      AND i.indpred IS NULL AND i.indexprs IS NULL
      AND a.attname = %(column)s
) AS is_unique
