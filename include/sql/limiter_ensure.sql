-- Create a limiter scope, or update its configured rate, burst and hold. The ceiling
-- is retention.limiter_ceiling's (migration 0023): the configured rate, lowered to the
-- pace of the API's rate-limit headers while their quota holds; %(rate)s is the
-- starting ceiling (an auto scope's low start). The effective rate never exceeds the
-- ceiling, and the bucket never holds more than burst - configured rate x hold (the
-- take-ahead's reserve, migration 0025). A new auto scope holds no more tokens than its
-- starting rate earns in a second (not its burst): before the first answer's headers,
-- its calls go at the low start. Touches one row; returns the seconds until the
-- headers' quota resets (NULL: no headers followed).
INSERT INTO retention.rate_limiters AS r (
    scope, rate_ceiling, effective_rate, min_rate, burst, recovery_seconds, hold_seconds,
    tokens, configured_rate, auto_rate
) VALUES (
    %(scope)s, %(rate)s, %(rate)s, %(min_rate)s, %(burst)s, %(recovery_seconds)s,
    %(hold_seconds)s,
    CASE WHEN %(auto_rate)s THEN least(%(burst)s, %(rate)s)
         ELSE greatest(1, %(burst)s - %(configured_rate)s * %(hold_seconds)s) END,
    %(configured_rate)s, %(auto_rate)s
)
ON CONFLICT (scope) DO UPDATE
SET rate_ceiling = retention.limiter_ceiling(
        excluded.configured_rate, excluded.auto_rate, r.learned_rate, r.learned_until,
        excluded.rate_ceiling),
    effective_rate = least(r.effective_rate, retention.limiter_ceiling(
        excluded.configured_rate, excluded.auto_rate, r.learned_rate, r.learned_until,
        excluded.rate_ceiling)),
    configured_rate = excluded.configured_rate,
    auto_rate = excluded.auto_rate,
    min_rate = excluded.min_rate,
    burst = excluded.burst,
    recovery_seconds = excluded.recovery_seconds,
    hold_seconds = excluded.hold_seconds,
    tokens = least(r.tokens,
                   greatest(1, excluded.burst - excluded.configured_rate * excluded.hold_seconds))
RETURNING extract(epoch FROM r.learned_until - clock_timestamp()) AS learned_seconds_left
