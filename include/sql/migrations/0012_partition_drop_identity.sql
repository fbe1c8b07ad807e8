-- Migration 0012: the partition fast path's evidence knows which table it detached,
-- and says what became of every partition it did not drop.
--
-- table_oid: the partition's pg_class oid, recorded before the detach. A table is
--   dropped later (by the run, or by a later run's finishing pass) only while its
--   name still resolves to this oid and it is not a partition of anything.
-- reason: why a record is 'abandoned' (the name now means another table, the table
--   was renamed or attached again: nothing is dropped), 'not_detached' (the detach
--   did not happen; the partition is still attached and stays with the windows) or
--   'left' (action 'rows': the partition was left to the row path, e.g. a view
--   depends on it, or rows at a DST gap are newer than the cutoff).
-- last_error, drop_attempts: a detached table that could not be dropped keeps its
--   state 'detached' with the error; reconcile makes every run dirty while any such
--   table of the policy is neither dropped nor deliberately kept (detach_only).
-- resolved_by_run: the run whose finishing pass closed a record of an earlier attempt.
-- estimated_rows: NULL means unknown (never analysed, and counting it timed out).
ALTER TABLE retention.partition_drops
    ADD COLUMN IF NOT EXISTS table_oid oid,
    ADD COLUMN IF NOT EXISTS reason text,
    ADD COLUMN IF NOT EXISTS last_error text,
    ADD COLUMN IF NOT EXISTS drop_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS resolved_by_run text,
    ALTER COLUMN estimated_rows DROP NOT NULL;

ALTER TABLE retention.partition_drops DROP CONSTRAINT IF EXISTS partition_drops_action_check;
ALTER TABLE retention.partition_drops ADD CONSTRAINT partition_drops_action_check
    CHECK (action IN ('detach', 'drop', 'rows'));

ALTER TABLE retention.partition_drops DROP CONSTRAINT IF EXISTS partition_drops_state_check;
ALTER TABLE retention.partition_drops ADD CONSTRAINT partition_drops_state_check
    CHECK (state IN ('started', 'detached', 'dropped', 'abandoned', 'not_detached', 'left'));

-- The finishing pass and reconcile look for a policy's unfinished records.
CREATE INDEX IF NOT EXISTS partition_drops_unfinished
    ON retention.partition_drops (policy, started_at)
    WHERE state IN ('started', 'detached');
