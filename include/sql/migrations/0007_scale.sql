-- Migration 0007: what the probe planner noticed about a run's plan (a missing
-- timestamp index, keys out of time order), and how long each window waited
-- for the database's health or the pause switch.
ALTER TABLE retention.runs ADD COLUMN IF NOT EXISTS plan_notes jsonb;
ALTER TABLE retention.windows ADD COLUMN IF NOT EXISTS pauses integer NOT NULL DEFAULT 0;
ALTER TABLE retention.windows
    ADD COLUMN IF NOT EXISTS paused_seconds double precision NOT NULL DEFAULT 0;
ALTER TABLE retention.windows ADD COLUMN IF NOT EXISTS pause_reasons jsonb;
