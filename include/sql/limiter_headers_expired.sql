-- The quota the API's headers described has reset, and no answer since said anything
-- new: the scope's ceiling falls back (retention.limiter_ceiling, migration 0023: the
-- configured rate, or an auto scope's last learned pace); the effective rate climbs
-- back to it as after a 429 (over recovery_seconds). Touches the scope's row of
-- retention.rate_limiters only once that quota has reset; returns the new ceiling.
UPDATE retention.rate_limiters
SET rate_ceiling = retention.limiter_ceiling(coalesce(configured_rate, rate_ceiling), auto_rate,
                                             learned_rate, learned_until, rate_ceiling)
WHERE scope = %(scope)s AND learned_until <= clock_timestamp()
RETURNING rate_ceiling
