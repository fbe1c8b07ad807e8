-- Count every row older than the cutoff, in or out of planned windows: n those no
-- legal hold keeps (what the run had to delete), held those one keeps (reported, not
-- dirt). Binds hold_policy. Read-only; after a clean run this reads the timestamp
-- index's range of the held rows only.
SELECT count(*) FILTER (WHERE NOT {held}) AS n,
       count(*) FILTER (WHERE {held}) AS held
FROM {table} WHERE {ts} < %(cutoff)s
