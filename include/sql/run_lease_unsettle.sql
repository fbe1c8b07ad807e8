-- The holder's DAG run is running (again: its tasks were cleared): forget that it was
-- once seen ended, so its next end gets the full takeover grace. The caller holds the
-- row lock (run_lease_hold). Touches at most one row of retention.run_leases.
UPDATE retention.run_leases SET holder_ended_at = NULL
WHERE policy = %(policy)s AND holder_ended_at IS NOT NULL
