-- Migration 0023: a limiter scope follows the API's own rate-limit headers.
--
-- rate_ceiling stays the ceiling retention.take_tokens applies (its arithmetic is
-- unchanged); what sets it is now written down beside it:
--   configured_rate  the policy's rate_per_second (with rate_per_second: auto, its
--                    max_rate_per_second): no header raises the scope above it;
--   auto_rate        rate_per_second: auto, whose rate comes from the headers;
--   learned_rate     the pace the API's headers last gave (calls left ÷ seconds to
--                    the reset), kept after the reset as an auto scope's rate;
--   learned_until    when the quota those headers described resets: until then the
--                    ceiling is the lower of configured_rate and learned_rate;
--   header_problem, header_problem_at
--                    the last malformed or contradictory headers a worker ignored,
--                    and when: a run's summary says so once (limiter_header_problem_*).
-- retention.limiter_ceiling is the one rule for the ceiling those columns give; the
-- statements that write rate_ceiling (limiter_ensure, limiter_follow_headers,
-- limiter_headers_expired) all call it. Existing scopes keep their ceiling as their
-- configured rate.
ALTER TABLE retention.rate_limiters
    ADD COLUMN IF NOT EXISTS configured_rate double precision CHECK (configured_rate > 0),
    ADD COLUMN IF NOT EXISTS auto_rate boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS learned_rate double precision CHECK (learned_rate > 0),
    ADD COLUMN IF NOT EXISTS learned_until timestamptz,
    ADD COLUMN IF NOT EXISTS header_problem text,
    ADD COLUMN IF NOT EXISTS header_problem_at timestamptz;

UPDATE retention.rate_limiters SET configured_rate = rate_ceiling WHERE configured_rate IS NULL;

-- The ceiling of a scope: while the headers' quota holds (p_learned_until is later
-- than now), the lower of the configured rate and the headers' pace; after it, the
-- configured rate, except for an auto scope, which keeps the last pace it learned
-- (p_starting before it ever learned one).
CREATE OR REPLACE FUNCTION retention.limiter_ceiling(
    p_configured double precision,
    p_auto boolean,
    p_learned_rate double precision,
    p_learned_until timestamptz,
    p_starting double precision
) RETURNS double precision LANGUAGE sql VOLATILE AS $fn$
    SELECT CASE
        WHEN p_learned_until > clock_timestamp() AND p_learned_rate IS NOT NULL
            THEN least(p_configured, p_learned_rate)
        WHEN p_auto THEN least(p_configured, coalesce(p_learned_rate, p_starting))
        ELSE p_configured
    END
$fn$;
