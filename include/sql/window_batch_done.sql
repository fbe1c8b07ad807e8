-- Count one committed delete batch; runs inside the batch's own transaction so
-- the ledger never disagrees with the table. Touches one row of retention.windows.
UPDATE retention.windows
SET rows_deleted = rows_deleted + %(deleted)s,
    batches = batches + 1,
    longest_batch_ms = greatest(coalesce(longest_batch_ms, 0), %(batch_ms)s)
WHERE window_key = %(window_key)s
