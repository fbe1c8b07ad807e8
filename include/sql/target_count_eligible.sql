-- Count every row older than the cutoff, in or out of planned windows.
-- Read-only; after a clean run this reads an empty range of the timestamp index.
SELECT count(*) AS n FROM {table} WHERE {ts} < %(cutoff)s
