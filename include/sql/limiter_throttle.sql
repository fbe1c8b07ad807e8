-- Close a limiter scope for Retry-After and, if it was open, lower its effective
-- rate to what the API admitted, or halve it (migration 0025). Locks the
-- scope's row.
SELECT retention.throttle_scope(%(scope)s, %(seconds)s) AS effective_rate
