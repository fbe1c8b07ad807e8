-- Record an erasure request, once per request key: the same request twice is one
-- erasure. No row back means the key was known; erasure_by_key.sql then reads it.
-- Inserts one row of retention.erasures.
INSERT INTO retention.erasures (request_key, policy, scope, value, reason, requested_by, deadline)
VALUES (%(request_key)s, %(policy)s, %(scope)s, %(value)s, %(reason)s, %(requested_by)s,
        coalesce(%(deadline)s, now() + interval '30 days'))
ON CONFLICT (request_key) DO NOTHING
RETURNING *
