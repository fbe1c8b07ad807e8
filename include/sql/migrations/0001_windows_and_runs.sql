-- Migration 0001: the window ledger and the run summaries.
-- Applied once per database by retention.migrate under a transaction-scoped
-- advisory lock, so concurrent DAG runs cannot race each other here.
--
-- A run's plan is identified by plan_id (run id + the DAG run's start): a
-- retried task reuses it, while a DAG run re-created under the same run id
-- (deleted and re-triggered, or `airflow dags test` twice) plans afresh.
-- retention.runs keeps one row per (policy, run id): the latest plan's.
CREATE TABLE IF NOT EXISTS retention.runs (
    policy               text        NOT NULL,
    run_id               text        NOT NULL,
    plan_id              text        NOT NULL,
    dag_id               text        NOT NULL,
    table_name           text        NOT NULL,
    logical_date         timestamptz,
    anchor_source        text        NOT NULL,
    cutoff               timestamptz NOT NULL,
    dry_run              boolean     NOT NULL,
    status               text        NOT NULL DEFAULT 'planned'
                         CHECK (status IN ('planned', 'clean', 'dirty', 'dry_run')),
    window_rows          bigint      NOT NULL,
    batch_rows           bigint      NOT NULL,
    windows              integer     NOT NULL DEFAULT 0,
    rows_planned         bigint      NOT NULL DEFAULT 0,
    rows_deleted         bigint,
    rows_counted         bigint,
    rows_remaining       bigint,
    rows_outside_windows bigint,
    plan_seconds         double precision,
    delete_seconds       double precision,
    reconcile_seconds    double precision,
    longest_batch_ms     double precision,
    planned_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz,
    summary              jsonb,
    PRIMARY KEY (policy, run_id)
);

CREATE TABLE IF NOT EXISTS retention.windows (
    window_key       text        PRIMARY KEY,
    policy           text        NOT NULL,
    run_id           text        NOT NULL,
    plan_id          text        NOT NULL,
    window_no        integer     NOT NULL,
    tenant_scope     text        NOT NULL CHECK (tenant_scope IN ('all', 'one', 'null')),
    tenant           text,
    cutoff           timestamptz NOT NULL,
    first_id         bigint      NOT NULL,
    last_id          bigint      NOT NULL,
    expected_rows    bigint      NOT NULL,
    state            text        NOT NULL DEFAULT 'planned'
                     CHECK (state IN ('planned', 'running', 'done', 'counted', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0,
    batches          integer     NOT NULL DEFAULT 0,
    timeouts         integer     NOT NULL DEFAULT 0,
    rows_deleted     bigint      NOT NULL DEFAULT 0,
    rows_counted     bigint,
    rows_remaining   bigint,
    seconds          double precision NOT NULL DEFAULT 0,
    longest_batch_ms double precision,
    last_error       text,
    planned_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    UNIQUE (policy, plan_id, window_no),
    CHECK (first_id <= last_id)
);

CREATE INDEX IF NOT EXISTS windows_policy_plan ON retention.windows (policy, plan_id);
