-- Migration 0021: an operation is discarded at most once per time it went dead.
-- Two discards of the same dead operation at the same moment both passed the
-- dead_letter_discard.sql check (FOR SHARE does not keep a second reader out) and
-- wrote two rows; the unique index makes the second one a no-op (ON CONFLICT DO
-- NOTHING in that file). Replaces the plain index on the same columns. Existing
-- duplicates, if any, keep their first row.
DELETE FROM retention.discards AS later
USING retention.discards AS earlier
WHERE later.operation_key = earlier.operation_key
  AND later.dead_since = earlier.dead_since
  AND later.discard_id > earlier.discard_id;
CREATE UNIQUE INDEX IF NOT EXISTS discards_operation_once
    ON retention.discards (operation_key, dead_since);
DROP INDEX IF EXISTS retention.discards_operation;
