-- When the next pending operation of a window becomes due (null when none). Read-only.
SELECT min(not_before) AS next_due, count(*) AS pending
FROM retention.operations
WHERE window_key = %(window_key)s AND state IN ('pending', 'in_flight')
