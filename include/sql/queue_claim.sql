-- Leased queue, any job kind (its table: retention.operations or retention.outbox).
-- Claim up to n jobs of a policy (or of one scope, e.g. a window, by scope_filter)
-- that are in the given state and due: pending ones whose not_before has passed,
-- or in-flight ones whose lease expired (reclaiming counts a lease expiry).
-- A kind with priorities (operations: 'urgent' erasures before 'routine' work) claims
-- pending jobs by priority, then by the due column ({priority_order} is the rank, or
-- nothing for a kind without priorities or for reclaimed leases).
-- FOR UPDATE SKIP LOCKED lets concurrent claimers take disjoint sets; the partial
-- indexes on (policy | scope, [priority rank,] due column) WHERE state = ... make this
-- an ordered index scan that stops after n rows, however long the backlog.
-- Locks the claimed rows until the (short) claiming transaction commits.
WITH picked AS (
    SELECT {id} AS job_id
    FROM {table}
    WHERE policy = %(policy)s
      AND {scope_filter}
      AND state = %(state)s
      AND {due_column} <= now()
    ORDER BY {priority_order}{due_column}
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {table} AS q
SET state = 'in_flight',
    lease_owner = %(owner)s,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
    claim_count = q.claim_count + 1,
    lease_expiries = q.lease_expiries + (q.state = 'in_flight')::int,
    updated_at = now()
FROM picked
WHERE {q_id} = picked.job_id
RETURNING q.*
