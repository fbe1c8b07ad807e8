-- Migration 0008: evidence of the partition fast path. One row per partition a
-- run detached (and dropped, unless the policy keeps detached partitions), with
-- its bounds and row estimate, written before the DDL runs and completed after,
-- so an interrupted drop still leaves its trace.
CREATE TABLE IF NOT EXISTS retention.partition_drops (
    policy          text        NOT NULL,
    run_id          text        NOT NULL,
    partition_name  text        NOT NULL,
    bounds          text        NOT NULL,
    estimated_rows  bigint      NOT NULL,
    action          text        NOT NULL CHECK (action IN ('detach', 'drop')),
    state           text        NOT NULL DEFAULT 'started'
                    CHECK (state IN ('started', 'detached', 'dropped')),
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    PRIMARY KEY (policy, run_id, partition_name)
);
CREATE INDEX IF NOT EXISTS partition_drops_started ON retention.partition_drops (policy, started_at);
