-- Create a limiter scope, or update its configured ceiling, burst and hold; the
-- effective rate never exceeds the new ceiling, and the bucket never holds more
-- than burst - rate x hold (the take-ahead's reserve, migration 0022). Touches
-- one row.
INSERT INTO retention.rate_limiters (
    scope, rate_ceiling, effective_rate, min_rate, burst, recovery_seconds, hold_seconds, tokens
) VALUES (
    %(scope)s, %(rate)s, %(rate)s, %(min_rate)s, %(burst)s, %(recovery_seconds)s,
    %(hold_seconds)s, greatest(1, %(burst)s - %(rate)s * %(hold_seconds)s)
)
ON CONFLICT (scope) DO UPDATE
SET rate_ceiling = excluded.rate_ceiling,
    effective_rate = least(retention.rate_limiters.effective_rate, excluded.rate_ceiling),
    min_rate = excluded.min_rate,
    burst = excluded.burst,
    recovery_seconds = excluded.recovery_seconds,
    hold_seconds = excluded.hold_seconds,
    tokens = least(retention.rate_limiters.tokens, excluded.tokens)
