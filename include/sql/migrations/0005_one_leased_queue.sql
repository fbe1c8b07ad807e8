-- Migration 0005: the outbox becomes a job kind of the same leased queue as the
-- operations ledger, so it gains the columns the queue's shared statements use
-- (claims and lease expiries counted, a failure class on failed deliveries).
-- Columns are only added; nothing is renamed.
ALTER TABLE retention.outbox ADD COLUMN IF NOT EXISTS claim_count integer NOT NULL DEFAULT 0;
ALTER TABLE retention.outbox ADD COLUMN IF NOT EXISTS lease_expiries integer NOT NULL DEFAULT 0;
ALTER TABLE retention.outbox ADD COLUMN IF NOT EXISTS failure_class text;

CREATE OR REPLACE VIEW retention.dead_events AS
SELECT event_id, policy, operation_key, event_type, attempts, last_status_code, last_error,
       created_at, updated_at AS dead_since, failure_class
FROM retention.outbox
WHERE state = 'dead';
