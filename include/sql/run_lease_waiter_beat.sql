-- A run looks for the run lease: record it as waiting (its cutoff and logical date),
-- or refresh when it last looked. The caller holds the lease row's lock
-- (run_lease_hold). Touches one row of retention.run_lease_waiters; returns how long
-- the run has been waiting (0 at its first look).
INSERT INTO retention.run_lease_waiters AS w (policy, run_id, dag_id, cutoff, logical_date)
VALUES (%(policy)s, %(run_id)s, %(dag_id)s, %(cutoff)s, %(logical_date)s)
ON CONFLICT (policy, run_id) DO UPDATE
SET last_seen = now(), cutoff = excluded.cutoff, logical_date = excluded.logical_date,
    dag_id = excluded.dag_id
RETURNING extract(epoch FROM now() - w.first_seen) AS waited_seconds
