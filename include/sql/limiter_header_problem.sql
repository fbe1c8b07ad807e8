-- Remember the malformed or contradictory rate-limit headers a worker of the scope
-- ignored, and when (a run's summary says so once: limiter_header_problem_since).
-- Touches one row of retention.rate_limiters.
UPDATE retention.rate_limiters
SET header_problem = %(problem)s,
    header_problem_at = clock_timestamp()
WHERE scope = %(scope)s
