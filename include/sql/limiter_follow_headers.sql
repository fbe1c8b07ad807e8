-- Follow the API's rate-limit headers (retention.queue.rate_headers): %(remaining)s
-- calls are left of its quota, and %(pace)s is the pace that spends them by the reset
-- (retention.queue.limiter.header_pace: remaining ÷ seconds, never above the configured
-- rate nor below one call per hour; NULL when none are left), held for
-- %(steer_seconds)s (until the reset, at most as long as a Retry-After may close it).
-- Calls left: the scope's ceiling and effective rate become that pace (never above the
-- configured rate; see retention.limiter_ceiling, migration 0023) until then; the bucket
-- holds no more tokens than calls are left. Within recovery_seconds of a 429 that lowered
-- the rate, the headers only lower it: the rate climbs back to their pace as after any
-- 429 (an API can enforce a limit its headers do not describe). None left: the scope
-- closes for %(steer_seconds)s, its rate unchanged, as limiter_pause closes it (the
-- count of busy grants a 429 measures restarts when it reopens, migration 0025).
-- Numbers are bound as double precision: an API's counts may exceed a 32-bit integer.
-- Locks the scope's row of retention.rate_limiters for one statement; returns the
-- effective rate and the seconds until the headers' word lapses.
WITH heard AS (
    SELECT clock_timestamp() + make_interval(secs => %(steer_seconds)s::double precision)
               AS resets,
           %(pace)s::double precision AS pace
)
UPDATE retention.rate_limiters AS r
SET learned_rate = coalesce(heard.pace, r.learned_rate),
    learned_until = heard.resets,
    rate_ceiling = CASE WHEN heard.pace IS NULL THEN r.rate_ceiling
        ELSE retention.limiter_ceiling(coalesce(r.configured_rate, r.rate_ceiling), r.auto_rate,
                                       heard.pace, heard.resets, r.rate_ceiling) END,
    effective_rate = CASE
        WHEN heard.pace IS NULL THEN r.effective_rate
        WHEN r.last_decrease_at > clock_timestamp() - make_interval(secs => r.recovery_seconds)
        THEN least(r.effective_rate,
                   retention.limiter_ceiling(coalesce(r.configured_rate, r.rate_ceiling),
                                             r.auto_rate, heard.pace, heard.resets,
                                             r.rate_ceiling))
        ELSE retention.limiter_ceiling(coalesce(r.configured_rate, r.rate_ceiling), r.auto_rate,
                                       heard.pace, heard.resets, r.rate_ceiling) END,
    tokens = CASE WHEN heard.pace IS NULL THEN 0
        ELSE least(r.tokens, %(remaining)s::double precision) END,
    closed_until = CASE WHEN heard.pace IS NULL THEN greatest(r.closed_until, heard.resets)
        ELSE r.closed_until END,
    updated_at = CASE WHEN heard.pace IS NULL THEN greatest(r.updated_at, heard.resets)
        ELSE r.updated_at END,
    busy_since = CASE WHEN heard.pace IS NULL THEN greatest(r.busy_since, heard.resets)
        ELSE r.busy_since END,
    granted_before_busy = CASE WHEN heard.pace IS NULL THEN r.granted_total
        ELSE r.granted_before_busy END
FROM heard
WHERE r.scope = %(scope)s
RETURNING r.effective_rate, r.rate_ceiling,
          extract(epoch FROM r.learned_until - clock_timestamp()) AS learned_seconds_left
