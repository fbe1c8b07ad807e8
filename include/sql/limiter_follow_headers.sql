-- Follow the API's rate-limit headers (retention.queue.rate_headers): %(remaining)s
-- calls are left of a quota that resets in %(reset_seconds)s seconds.
-- Calls left: the scope's ceiling and effective rate become the pace that spends them
-- by the reset (remaining ÷ seconds, never above the configured rate; see
-- retention.limiter_ceiling, migration 0022), until the reset; the bucket holds no more
-- tokens than calls are left. Within recovery_seconds of a 429 that halved the rate,
-- the headers only lower it: the rate climbs back to their pace as after any 429 (an
-- API can enforce a limit its headers do not describe). None left: the scope closes for %(close_seconds)s (the
-- reset, capped as a Retry-After is), its rate unchanged, as limiter_pause closes it.
-- Locks the scope's row of retention.rate_limiters for one statement; returns the
-- effective rate and the seconds until the reset.
WITH heard AS (
    SELECT clock_timestamp() + make_interval(secs => %(reset_seconds)s::double precision)
               AS resets,
           clock_timestamp() + make_interval(secs => %(close_seconds)s::double precision)
               AS reopens,
           CASE WHEN %(remaining)s::integer > 0
                THEN %(remaining)s::integer / %(reset_seconds)s::double precision END AS pace
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
    tokens = CASE WHEN heard.pace IS NULL THEN 0 ELSE least(r.tokens, %(remaining)s::integer) END,
    closed_until = CASE WHEN heard.pace IS NULL THEN greatest(r.closed_until, heard.reopens)
        ELSE r.closed_until END,
    updated_at = CASE WHEN heard.pace IS NULL THEN greatest(r.updated_at, heard.reopens)
        ELSE r.updated_at END
FROM heard
WHERE r.scope = %(scope)s
RETURNING r.effective_rate, r.rate_ceiling,
          extract(epoch FROM r.learned_until - clock_timestamp()) AS learned_seconds_left
