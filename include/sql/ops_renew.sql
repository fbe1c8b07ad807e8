-- Extend the leases of operations this worker still holds and is about to work on.
-- Only the current lease owner can renew. Touches the named rows only.
UPDATE retention.operations
SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s), updated_at = now()
WHERE operation_key = ANY(%(keys)s) AND lease_owner = %(owner)s AND state = 'in_flight'
