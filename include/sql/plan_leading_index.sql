-- Whether a valid, non-partial index of the table leads with a column (the
-- planner probes through it only if it exists). Read-only; catalog only.
SELECT EXISTS (
    SELECT 1
    FROM pg_index AS i
    JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
    WHERE i.indrelid = format('%%I.%%I', %(schema)s::text, %(table)s::text)::regclass
      AND a.attname = %(column)s
      AND i.indisvalid
      AND i.indpred IS NULL
) AS present
