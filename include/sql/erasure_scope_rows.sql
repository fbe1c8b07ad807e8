-- How many rows of an erasure's scope are still in the policy's table, whatever their
-- age ({scope_filter} names the scope's column). Read-only.
SELECT count(*) AS rows_left FROM {table} WHERE {scope_filter}
