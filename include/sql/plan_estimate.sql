-- The planner's estimate (from the table's statistics) of a scope's eligible
-- rows. No key bounds: the probed range holds every eligible row, and a bound
-- on the key would be multiplied in as if keys and time were independent.
-- EXPLAIN only: nothing is read from the table.
EXPLAIN (FORMAT JSON)
SELECT 1
FROM {table}
WHERE {ts} < %(cutoff)s
  AND {tenant_filter}
