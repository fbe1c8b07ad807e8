-- Migration 0013: dead operations reviewed and discarded. A person who decided that a
-- dead operation will not be replayed (its object is kept on purpose, its row's data
-- is wrong and will be fixed by hand, ...) records it here: who, when, an optional
-- note, and the operation as it was when discarded (dead_since: its updated_at then).
--
-- An operation is discarded while it is still dead and its updated_at is that
-- dead_since: a replay (the recorded undo, in retention.replays) moves it to pending
-- and so ends the discard without erasing it; if it goes dead again it is a new dead
-- letter. Nothing here deletes or changes an operation. Added tables only.
CREATE TABLE IF NOT EXISTS retention.discards (
    discard_id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_key  text        NOT NULL,
    policy         text        NOT NULL,
    discarded_by   text        NOT NULL,
    note           text,
    dead_since     timestamptz NOT NULL,
    discarded_at   timestamptz NOT NULL DEFAULT now()
);

-- "Is this dead operation discarded?": the dead-letter lists, the alert counts and
-- reconcile ask it per operation.
CREATE INDEX IF NOT EXISTS discards_operation ON retention.discards (operation_key, dead_since);
