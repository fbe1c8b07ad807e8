-- The oldest row still older than the cutoff (the lag alert's measure). Read-only;
-- with an index on the timestamp this reads one index entry.
SELECT min({ts}) AS oldest FROM {table} WHERE {ts} < %(cutoff)s
