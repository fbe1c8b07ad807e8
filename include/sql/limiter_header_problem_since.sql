-- The last malformed or contradictory rate-limit headers a worker of the scope ignored,
-- if it ignored some since %(since)s (a run's start): the run summary's note.
-- Read-only; one row of retention.rate_limiters.
SELECT header_problem
FROM retention.rate_limiters
WHERE scope = %(scope)s AND header_problem_at >= %(since)s
