-- The key column's equal-depth histogram from ANALYZE (pg_stats), used to cut
-- windows that hold about the same number of rows even where keys have gaps.
-- Read-only; empty until the table has been analyzed.
SELECT histogram_bounds::text::bigint[] AS bounds
FROM pg_stats
WHERE schemaname = %(schema)s
  AND tablename = %(table)s
  AND attname = %(column)s
