-- Claim up to n due operations of a policy (optionally of one window): pending ones
-- whose not_before has passed, and in-flight ones whose lease expired (counted as a
-- lease expiry). FOR UPDATE SKIP LOCKED lets concurrent claimers take disjoint sets.
-- Locks the claimed rows until the (short) claiming transaction commits.
WITH picked AS (
    SELECT operation_key
    FROM retention.operations
    WHERE policy = %(policy)s
      AND (%(window_key)s::text IS NULL OR window_key = %(window_key)s::text)
      AND ((state = 'pending' AND not_before <= now())
           OR (state = 'in_flight' AND lease_expires_at < now()))
    ORDER BY not_before, operation_key
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
)
UPDATE retention.operations AS o
SET state = 'in_flight',
    lease_owner = %(owner)s,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
    claim_count = o.claim_count + 1,
    lease_expiries = o.lease_expiries + (o.state = 'in_flight')::int,
    updated_at = now()
FROM picked
WHERE o.operation_key = picked.operation_key
RETURNING o.operation_key, o.row_key, o.object_id, o.tenant, o.version, o.window_key,
          o.attempt_count, o.claim_count, o.auth_failure_count
