-- Give the policy's run lease to a run (the row is locked by run_lease_hold).
-- Touches one row of retention.run_leases.
UPDATE retention.run_leases
SET run_id = %(run_id)s,
    dag_id = %(dag_id)s,
    taken_at = CASE WHEN run_id IS DISTINCT FROM %(run_id)s THEN now() ELSE taken_at END,
    released_at = NULL,
    last_run_id = CASE WHEN %(taken_over)s::text IS NOT NULL THEN %(taken_over)s ELSE last_run_id END,
    last_outcome = CASE WHEN %(taken_over)s::text IS NOT NULL THEN 'taken_over' ELSE last_outcome END
WHERE policy = %(policy)s
