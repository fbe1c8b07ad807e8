-- Move chosen dead operations of a policy back to pending (attempts reset, due now)
-- and write one audit row naming the keys moved, in one statement.
-- Filters: operation keys, failure class, dead since; at least one is given.
-- Touches the matching rows of retention.operations and one row of retention.replays.
WITH moved AS (
    UPDATE retention.operations
    SET state = 'pending',
        attempt_count = 0,
        auth_failure_count = 0,
        not_before = now(),
        lease_owner = NULL,
        lease_expires_at = NULL,
        updated_at = now()
    WHERE policy = %(policy)s
      AND state = 'dead'
      AND (%(keys)s::text[] IS NULL OR operation_key = ANY(%(keys)s::text[]))
      AND (%(failure_class)s::text IS NULL OR failure_class = %(failure_class)s::text)
      AND (%(since)s::timestamptz IS NULL OR updated_at >= %(since)s::timestamptz)
    RETURNING operation_key
)
INSERT INTO retention.replays (policy, requested_by, reason, filters, operation_keys)
SELECT %(policy)s, %(requested_by)s, %(reason)s, %(filters)s,
       coalesce(array_agg(operation_key ORDER BY operation_key), ARRAY[]::text[])
FROM moved
RETURNING replay_id, operation_keys
