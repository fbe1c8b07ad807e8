-- Take one token of a limiter scope, or learn how long to wait (see migration 0002).
SELECT granted, wait_seconds, effective_rate FROM retention.take_token(%(scope)s)
