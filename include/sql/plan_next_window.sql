-- Find the next plan window: the first window_rows eligible keys after a key.
-- Walks the key index (keyset pagination), never counts the whole table.
-- Read-only; takes no row locks.
SELECT min(k) AS first_id, max(k) AS last_id, count(*) AS expected_rows
FROM (
    SELECT {key} AS k
    FROM {table}
    WHERE {key} > %(after)s
      AND {ts} < %(cutoff)s
      AND {tenant_filter}
    ORDER BY {key}
    LIMIT %(window_rows)s
) AS next_window
