-- Close a window attempt (done, counted for a dry run, or failed) with its timings.
-- Touches one row of retention.windows.
UPDATE retention.windows
SET state = %(state)s,
    seconds = seconds + %(seconds)s,
    timeouts = timeouts + %(timeouts)s,
    rows_counted = coalesce(%(rows_counted)s, rows_counted),
    last_error = %(last_error)s,
    finished_at = now()
WHERE window_key = %(window_key)s
