-- Create a limiter scope, or update its configured ceiling and burst; the
-- effective (AIMD) rate never exceeds the new ceiling. Touches one row.
INSERT INTO retention.rate_limiters (
    scope, rate_ceiling, effective_rate, min_rate, burst, recovery_seconds, tokens
) VALUES (
    %(scope)s, %(rate)s, %(rate)s, %(min_rate)s, %(burst)s, %(recovery_seconds)s, %(burst)s
)
ON CONFLICT (scope) DO UPDATE
SET rate_ceiling = excluded.rate_ceiling,
    effective_rate = least(retention.rate_limiters.effective_rate, excluded.rate_ceiling),
    min_rate = excluded.min_rate,
    burst = excluded.burst,
    recovery_seconds = excluded.recovery_seconds,
    tokens = least(retention.rate_limiters.tokens, excluded.burst)
