-- Claim up to n operations of a policy (or of one window, by window_filter) that
-- are in the given state and due: pending ones whose not_before has passed, or
-- in-flight ones whose lease expired (reclaiming counts a lease expiry).
-- FOR UPDATE SKIP LOCKED lets concurrent claimers take disjoint sets; the
-- partial indexes on (policy | window_key, due column) WHERE state = ... make
-- this an ordered index scan that stops after n rows, however long the backlog.
-- Locks the claimed rows until the (short) claiming transaction commits.
WITH picked AS (
    SELECT operation_key
    FROM retention.operations
    WHERE policy = %(policy)s
      AND {window_filter}
      AND state = %(state)s
      AND {due_column} <= now()
    ORDER BY {due_column}
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
