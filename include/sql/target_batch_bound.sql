-- Upper key of the next sub-batch: the batch_rows-th key of the window's scope
-- after a key (eligible or not), so the delete that follows can match at most
-- batch_rows rows. Read-only; usually an index-only scan of the key index.
SELECT max(k) AS upto, count(*) AS keys
FROM (
    SELECT {key} AS k
    FROM {table}
    WHERE {key} > %(after)s
      AND {key} <= %(last_id)s
      AND {tenant_filter}
    ORDER BY {key}
    LIMIT %(batch_rows)s
) AS next_batch
