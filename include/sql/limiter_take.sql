-- Take up to %(wanted)s tokens of a limiter scope (as many as it holds), or learn
-- how long to wait for one (see migrations 0002, 0009 and 0025). Locks the
-- scope's row.
SELECT granted, wait_seconds, effective_rate
FROM retention.take_tokens(%(scope)s, %(wanted)s)
