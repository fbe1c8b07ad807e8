-- The Retention view: the oldest row of a policy's table older than the cutoff
-- (its lag). Read-only; reads one end of the timestamp index, or nothing when
-- the table is clean.
SELECT min({ts}) AS oldest FROM {table} WHERE {ts} < %(cutoff)s
