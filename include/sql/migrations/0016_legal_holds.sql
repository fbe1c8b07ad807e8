-- Migration 0016: legal holds. A hold keeps what it matches (a tenant, a row key or
-- an object id) from every deletion of one policy, or of every policy (policy NULL),
-- from the moment it is placed until it is lifted. Row deletes exclude held rows in
-- the delete statement itself (hold_rows.sql), remote operations are screened just
-- before each call and wait in the new operation state 'held' (no attempt spent, not
-- a dead letter), and the partition fast path leaves a partition with a held row to
-- the row path. Who placed and lifted each hold, when and why, is kept: a lifted
-- hold is evidence and follows audit_days; an active one is never purged.
CREATE TABLE IF NOT EXISTS retention.holds (
    hold_id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    policy       text,
    match        text        NOT NULL CHECK (match IN ('tenant', 'key', 'object')),
    value        text        NOT NULL CHECK (btrim(value) <> ''),
    reason       text        NOT NULL CHECK (btrim(reason) <> ''),
    placed_by    text        NOT NULL,
    placed_at    timestamptz NOT NULL DEFAULT now(),
    lifted_by    text,
    lifted_at    timestamptz,
    lift_reason  text,
    CHECK ((lifted_at IS NULL) = (lifted_by IS NULL)),
    CHECK (lifted_at IS NULL OR btrim(coalesce(lift_reason, '')) <> '')
);

-- "Is this tenant, key or object held?": every delete statement asks it per row.
CREATE INDEX IF NOT EXISTS holds_active ON retention.holds (match, value, policy)
    WHERE lifted_at IS NULL;
CREATE INDEX IF NOT EXISTS holds_lifted ON retention.holds (lifted_at)
    WHERE lifted_at IS NOT NULL;

-- An operation whose object is held waits in 'held': not pending (no claim), not in
-- flight, not dead. Lifting the hold (or the next run's re-check) makes it pending.
ALTER TABLE retention.operations DROP CONSTRAINT IF EXISTS operations_state_check;
ALTER TABLE retention.operations ADD CONSTRAINT operations_state_check
    CHECK (state IN ('pending', 'in_flight', 'done', 'dead', 'held'));
CREATE INDEX IF NOT EXISTS operations_held ON retention.operations (policy)
    WHERE state = 'held';
