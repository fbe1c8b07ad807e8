-- How many of a policy's operations wait in 'held' (a legal hold, ours or the remote
-- side's, keeps their objects). Read-only; the operations_held index.
SELECT count(*) AS n FROM retention.operations WHERE policy = %(policy)s AND state = 'held'
