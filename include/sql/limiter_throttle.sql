-- Close a limiter scope for Retry-After and halve its effective rate (migration 0002).
SELECT retention.throttle_scope(%(scope)s, %(seconds)s) AS effective_rate
