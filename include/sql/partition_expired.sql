-- The direct partitions of a range-partitioned table whose upper bound is at or
-- before the cutoff, with their oid, bounds, the statistics' row count (reltuples:
-- -1 when never analysed on PostgreSQL 14+) and whether the upper bound is also at
-- or before cutoff - gap (the time zone's largest offset change: see partitions.py).
-- The default partition and partitions whose upper bound is MAXVALUE or after the
-- cutoff are never listed. Reads the catalog only.
--
-- Bounds are compared as values, never as printed text: pg_get_expr prints them in
-- the session's DateStyle, so the caller sets DateStyle ISO (and IntervalStyle) for
-- the transaction; only ISO prints a value that reads back as the same value (the
-- SQL style prints zone abbreviations, and 'IST' reads back as Israel's, not
-- Ireland's or India's). Each bound is cast to the timestamp column's type
-- ({ts_type}) and compared with the cutoff in the transaction's time zone, as the
-- deletes compare rows.
SELECT c.oid AS table_oid,
       n.nspname AS schema_name,
       c.relname AS partition_name,
       bound.text AS bounds,
       c.reltuples::float8 AS reltuples,
       i.inhdetachpending AS detach_pending,
       upper.value <= %(cutoff)s::timestamptz - make_interval(secs => %(gap_seconds)s)
           AS clear_of_gap
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS text) AS bound
CROSS JOIN LATERAL (
    SELECT substring(bound.text FROM 'TO \(''([^'']*)''\)$')::{ts_type} AS value
) AS upper
WHERE i.inhparent = to_regclass(format('%%I.%%I', %(schema)s::text, %(table)s::text))
  AND bound.text <> 'DEFAULT'
  AND upper.value IS NOT NULL
  AND upper.value <= %(cutoff)s::timestamptz
ORDER BY upper.value
