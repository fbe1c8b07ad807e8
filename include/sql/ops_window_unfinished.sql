-- Operations of a window still waiting (pending, or in flight under a lease) after
-- its pass: the backlog a later drain step works. Read-only.
SELECT count(*) AS unfinished
FROM retention.operations
WHERE window_key = %(window_key)s AND state IN ('pending', 'in_flight')
