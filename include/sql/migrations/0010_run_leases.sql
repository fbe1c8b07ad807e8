-- Migration 0010: one run at a time per policy, and windows that a stop ended.
--
-- retention.run_leases holds, per policy, the run allowed to plan, delete and
-- reconcile (run_id; NULL when free). A run takes it before its first
-- deletion and reconcile gives it back; a run whose DAG run ended without
-- reconcile (marked failed, killed) is taken over by the next one, which
-- closes what it left open. See retention.rows.run_lease.
CREATE TABLE IF NOT EXISTS retention.run_leases (
    policy       text        PRIMARY KEY,
    dag_id       text        NOT NULL,
    run_id       text,
    taken_at     timestamptz,
    released_at  timestamptz,
    last_run_id  text,
    last_outcome text        CHECK (last_outcome IN ('released', 'taken_over'))
);

-- 'cancelled': the window's task was told to stop (SIGTERM) and stopped between
-- batches, or it ended without closing its window and a later run or reconcile
-- closed it. Either way its remaining rows are left for a rerun, never lost.
ALTER TABLE retention.windows DROP CONSTRAINT IF EXISTS windows_state_check;
ALTER TABLE retention.windows ADD CONSTRAINT windows_state_check
    CHECK (state IN ('planned', 'running', 'done', 'counted', 'failed', 'cancelled'));

-- 'cancelled': a partial summary, recorded when the run stopped before reconcile.
ALTER TABLE retention.runs DROP CONSTRAINT IF EXISTS runs_status_check;
ALTER TABLE retention.runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('planned', 'clean', 'backlog', 'dirty', 'dry_run', 'cancelled'));

-- What the run's drain_operations pass did (operations of earlier runs and replays):
-- its deletions count in the run's rows_deleted next to its windows'.
ALTER TABLE retention.runs ADD COLUMN IF NOT EXISTS drain jsonb;
