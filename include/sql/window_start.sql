-- Mark a window attempt as started. Touches one row of retention.windows.
UPDATE retention.windows
SET state = 'running',
    attempts = attempts + 1,
    started_at = coalesce(started_at, now()),
    last_error = NULL
WHERE window_key = %(window_key)s
