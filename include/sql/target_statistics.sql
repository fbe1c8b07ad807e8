-- The statistics' row count of a policy's table (pg_class.reltuples; for a
-- partitioned table, the sum over its leaf partitions), to tell after a run whether
-- its deletions made the planner's estimates stale. NULL while one of them has no
-- statistics yet (reltuples -1: never vacuumed or analyzed). Reads the catalog only.
WITH target AS (
    SELECT c.oid, c.relkind
    FROM pg_class AS c
    JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relname = %(table)s
), leaves AS (
    SELECT tree.relid AS oid
    FROM target, pg_partition_tree(target.oid) AS tree
    WHERE target.relkind = 'p' AND tree.isleaf
    UNION ALL
    SELECT oid FROM target WHERE relkind <> 'p'  -- a plain table, or one partition
)
SELECT CASE WHEN bool_or(c.reltuples < 0) THEN NULL ELSE sum(c.reltuples) END::float8
       AS estimated_rows
FROM leaves
JOIN pg_class AS c ON c.oid = leaves.oid
