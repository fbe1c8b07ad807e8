-- The holder's DAG run has ended: note when that was first seen, and whether its
-- windows still 'running' have had time to stop (their tasks may be inside
-- Airflow's SIGTERM grace). The caller holds the row lock (run_lease_hold).
-- Touches one row of retention.run_leases; reads the holder's windows.
UPDATE retention.run_leases AS lease
SET holder_ended_at = coalesce(lease.holder_ended_at, now())
WHERE lease.policy = %(policy)s
RETURNING
    (SELECT count(*) FROM retention.windows AS w
     WHERE w.policy = lease.policy AND w.run_id = lease.run_id AND w.state = 'running')
        AS running_windows,
    now() - coalesce(lease.holder_ended_at, now()) >= make_interval(secs => %(grace)s)
        AS settled
