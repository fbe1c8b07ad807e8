-- Give back the policy's run lease, only if this run holds it.
-- Touches at most one row of retention.run_leases.
UPDATE retention.run_leases
SET run_id = NULL,
    released_at = now(),
    last_run_id = run_id,
    last_outcome = 'released'
WHERE policy = %(policy)s AND run_id = %(run_id)s
RETURNING policy
