-- Migration 0003: the transactional outbox of retention.deleted events.
--
-- The statement that marks an operation done (ops_finish.sql) inserts its event
-- in the same transaction, so an event exists exactly when a deletion was
-- recorded. event_id is derived from the operation key and the payload is
-- stored as the exact text that is signed and sent, so every redelivery carries
-- the same id and the same bytes.
CREATE TABLE IF NOT EXISTS retention.outbox (
    event_id          text        PRIMARY KEY,
    policy            text        NOT NULL,
    operation_key     text        NOT NULL,
    event_type        text        NOT NULL,
    payload           text        NOT NULL,
    state             text        NOT NULL DEFAULT 'pending'
                      CHECK (state IN ('pending', 'in_flight', 'delivered', 'dead')),
    attempts          integer     NOT NULL DEFAULT 0,
    not_before        timestamptz NOT NULL DEFAULT now(),
    lease_owner       text,
    lease_expires_at  timestamptz,
    last_status_code  integer,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    delivered_at      timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS outbox_pending
    ON retention.outbox (policy, not_before) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS outbox_leased
    ON retention.outbox (policy, lease_expires_at) WHERE state = 'in_flight';
CREATE INDEX IF NOT EXISTS outbox_operation ON retention.outbox (operation_key);

-- A receiver that answered 410 Gone is disabled for the policy until re-enabled.
CREATE TABLE IF NOT EXISTS retention.notify_endpoints (
    policy       text        PRIMARY KEY,
    disabled_at  timestamptz,
    reason       text
);

-- Replays of dead events are audited beside replays of dead operations.
ALTER TABLE retention.replays ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'operations';

CREATE OR REPLACE VIEW retention.dead_events AS
SELECT event_id, policy, operation_key, event_type, attempts, last_status_code, last_error,
       created_at, updated_at AS dead_since
FROM retention.outbox
WHERE state = 'dead';
