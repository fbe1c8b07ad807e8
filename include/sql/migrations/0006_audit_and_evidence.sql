-- Migration 0006: indexes for the audit purge (done operations by confirmation
-- time, and every policy name in the ledger, found by a loose index scan), and
-- for the windows that operations still refer to.
CREATE INDEX IF NOT EXISTS operations_done
    ON retention.operations (policy, done_at) WHERE state = 'done';
CREATE INDEX IF NOT EXISTS operations_window ON retention.operations (window_key);
CREATE INDEX IF NOT EXISTS operations_policy ON retention.operations (policy);
CREATE INDEX IF NOT EXISTS outbox_policy ON retention.outbox (policy);
CREATE INDEX IF NOT EXISTS runs_planned ON retention.runs (policy, planned_at);
CREATE INDEX IF NOT EXISTS replays_policy ON retention.replays (policy, replayed_at);

-- What this run's deliver_events did (its figures, or its error), written by
-- that task and read by reconcile, so a run's summary says whether its events
-- went out, and a failed delivery makes the run dirty.
ALTER TABLE retention.runs ADD COLUMN IF NOT EXISTS events_delivery jsonb;
