-- Migration 0015: a window counts the rows it deleted in each table, the policy's and
-- the child tables listed in children: (deleted with their parents in the same batch
-- transaction), so the run summary and its receipt can say what went where.
--
-- rows_deleted_by_table: 'schema.table' → rows, summed over the window's batches by
--   window_batch_done.sql; empty for a window deleted before this migration, and for a
--   policy without children (rows_deleted says it all).
ALTER TABLE retention.windows
    ADD COLUMN IF NOT EXISTS rows_deleted_by_table jsonb NOT NULL DEFAULT '{}'::jsonb;
