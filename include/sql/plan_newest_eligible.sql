-- The largest key among the newest eligible rows, found through the timestamp
-- index from the cutoff downwards (sample_rows rows, not the whole range): where
-- keys grow with time, this is the end of the eligible key range. Read-only;
-- only used when an index leads with the timestamp column.
SELECT max(k) AS k
FROM (
    SELECT {key} AS k
    FROM {table}
    WHERE {ts} < %(cutoff)s
      AND {tenant_filter}
    ORDER BY {ts} DESC
    LIMIT %(sample_rows)s
) AS newest
