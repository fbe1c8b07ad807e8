-- Store what reconciliation found left in a window. Touches one row of retention.windows.
UPDATE retention.windows
SET rows_remaining = %(rows_remaining)s
WHERE window_key = %(window_key)s
