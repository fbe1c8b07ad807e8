-- Count one committed delete batch; runs inside the batch's own transaction so
-- the ledger never disagrees with the table. Touches one row of retention.windows.
-- by_table ('schema.table' → rows, the policy's table and its listed children; empty
-- for a policy without children) is added to rows_deleted_by_table, table by table.
UPDATE retention.windows
SET rows_deleted = rows_deleted + %(deleted)s,
    batches = batches + 1,
    longest_batch_ms = greatest(coalesce(longest_batch_ms, 0), %(batch_ms)s),
    rows_deleted_by_table = CASE
        WHEN %(by_table)s::jsonb = '{{}}'::jsonb THEN rows_deleted_by_table
        ELSE (SELECT jsonb_object_agg(t.tbl, t.n)
              FROM (SELECT coalesce(o.key, b.key) AS tbl,
                           coalesce(o.value::bigint, 0) + coalesce(b.value::bigint, 0) AS n
                    FROM jsonb_each_text(rows_deleted_by_table) AS o
                    FULL JOIN jsonb_each_text(%(by_table)s::jsonb) AS b ON b.key = o.key) AS t)
    END
WHERE window_key = %(window_key)s
