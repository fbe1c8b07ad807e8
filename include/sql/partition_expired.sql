-- The direct partitions of a range-partitioned table whose upper bound is at or
-- before the cutoff (so every row they hold is older than it), with their bounds
-- and the statistics' row count. The default partition and partitions whose upper
-- bound is MAXVALUE or after the cutoff are never listed. Reads the catalog only;
-- bounds are cast to the timestamp column's type ({ts_type}) in the transaction's
-- time zone, as the deletes compare them.
SELECT n.nspname AS schema_name,
       c.relname AS partition_name,
       bound.text AS bounds,
       greatest(c.reltuples, 0)::bigint AS estimated_rows,
       i.inhdetachpending AS detach_pending
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS text) AS bound
CROSS JOIN LATERAL (
    SELECT substring(bound.text FROM 'TO \(''([^'']*)''\)$') AS literal
) AS upper
WHERE i.inhparent = to_regclass(format('%%I.%%I', %(schema)s::text, %(table)s::text))
  AND bound.text <> 'DEFAULT'
  AND upper.literal IS NOT NULL
  AND upper.literal::{ts_type} <= %(cutoff)s
ORDER BY upper.literal::{ts_type}
