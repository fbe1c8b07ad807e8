-- Migration 0022: how many passes an erasure took. Each pass of the
-- retention__erasure-requests DAG over an open erasure adds one (erasure_start.sql),
-- whether it ends the erasure, leaves it running, or fails part-way. Erasures recorded
-- before this migration keep NULL, "not counted": their earlier passes are unknown, and
-- a figure that starts at zero would read as a true count. Added column only.
ALTER TABLE retention.erasures ADD COLUMN IF NOT EXISTS passes integer;
ALTER TABLE retention.erasures ALTER COLUMN passes SET DEFAULT 0;
