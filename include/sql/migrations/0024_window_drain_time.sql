-- Migration 0024: a remote window records where its worker passes spent their time, so
-- that reconcile can say what bounded the run's drain (the API, the pool's slots, or the
-- database) and what to tune.
--
-- drain_time: the figures of retention.queue.bound.PassTime, summed over the window's
--   attempts by window_finish.sql: seconds in passes, in calls, waiting for the limiter,
--   paused by the gate, with nothing to call, the pool's sampled and busy seconds, the
--   number of calls, and why the pool's stats were not read (the latest attempt's);
--   empty for a row window and for a window closed before this migration.
ALTER TABLE retention.windows
    ADD COLUMN IF NOT EXISTS drain_time jsonb NOT NULL DEFAULT '{}'::jsonb;
