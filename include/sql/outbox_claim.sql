-- Claim up to n outbox events of a policy that are due: pending ones past
-- not_before (state 'pending', due_column not_before) or in-flight ones whose
-- lease expired (state 'in_flight', due_column lease_expires_at).
-- FOR UPDATE SKIP LOCKED: concurrent deliverers take disjoint events.
-- Locks the claimed rows until the short claiming transaction commits.
WITH picked AS (
    SELECT event_id
    FROM retention.outbox
    WHERE policy = %(policy)s
      AND state = %(state)s
      AND {due_column} <= now()
    ORDER BY {due_column}
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
)
UPDATE retention.outbox AS e
SET state = 'in_flight',
    lease_owner = %(owner)s,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
    updated_at = now()
FROM picked
WHERE e.event_id = picked.event_id
RETURNING e.event_id, e.payload, e.attempts
