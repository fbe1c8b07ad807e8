-- Migration 0004: receipts of signed inbound hints, for replay protection.
-- A webhook-id seen before is a repeat and changes nothing.
CREATE TABLE IF NOT EXISTS retention.hint_receipts (
    webhook_id   text        PRIMARY KEY,
    policy       text        NOT NULL,
    objects      integer     NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now()
);
