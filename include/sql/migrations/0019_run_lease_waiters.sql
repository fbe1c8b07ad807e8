-- Migration 0019: runs waiting for the run lease take it in the order of their cutoffs.
--
-- retention.run_lease_waiters holds, per policy, the runs whose take_run_lease sensor
-- found the lease held (or someone ahead of them): their cutoff and logical date, and
-- when they last looked (last_seen, refreshed at every poke). When the lease is free,
-- only the waiting run with the earliest cutoff (for runs of one policy: the earliest
-- logical date) may take it; a waiter that stopped looking (last_seen older than a few
-- pokes) or whose DAG run has ended is passed over. A run's row goes when it takes the
-- lease. See retention.rows.run_lease.
CREATE TABLE IF NOT EXISTS retention.run_lease_waiters (
    policy       text        NOT NULL,
    run_id       text        NOT NULL,
    dag_id       text        NOT NULL,
    cutoff       timestamptz NOT NULL,
    logical_date timestamptz,
    first_seen   timestamptz NOT NULL DEFAULT now(),
    last_seen    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (policy, run_id)
);
