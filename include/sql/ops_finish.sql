-- Record an attempt's outcome on an operation this worker holds: done, pending
-- again (with not_before), or dead. The lease-owner guard makes a stale worker's
-- write a no-op (it returns no row). Touches one row of retention.operations.
UPDATE retention.operations
SET state = %(state)s,
    attempt_count = attempt_count + %(attempt_spent)s,
    rate_limited_count = rate_limited_count + %(rate_limited)s,
    auth_failure_count = CASE WHEN %(auth_failure)s THEN auth_failure_count + 1 ELSE 0 END,
    not_before = coalesce(%(not_before)s, not_before),
    lease_owner = NULL,
    lease_expires_at = NULL,
    last_status_code = %(status)s,
    outcome_class = %(outcome)s,
    failure_class = %(failure_class)s,
    reason = %(reason)s,
    done_at = CASE WHEN %(state)s = 'done' THEN now() ELSE done_at END,
    updated_at = now()
WHERE operation_key = %(operation_key)s
  AND lease_owner = %(owner)s
  AND state = 'in_flight'
RETURNING row_key, version, attempt_count
