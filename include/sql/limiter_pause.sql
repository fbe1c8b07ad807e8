-- Close a limiter scope for a while without lowering its rate: the API did not
-- answer at all (an outage), which says nothing about the rate it can take.
-- The count of busy grants (migration 0025) restarts when it reopens.
-- Touches one row of retention.rate_limiters.
UPDATE retention.rate_limiters
SET closed_until = greatest(closed_until, clock_timestamp() + make_interval(secs => %(seconds)s)),
    tokens = 0,
    updated_at = greatest(updated_at, clock_timestamp() + make_interval(secs => %(seconds)s)),
    busy_since = greatest(busy_since, clock_timestamp() + make_interval(secs => %(seconds)s)),
    granted_before_busy = granted_total
WHERE scope = %(scope)s
