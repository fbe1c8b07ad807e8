-- Migration 0018: urgent erasures. One row per erasure request: which policy, its
-- scope (exactly one of a tenant, a row key or an object id), why, who asked and when,
-- by when it must be done (30 days by default: GDPR allows one month), where it is,
-- and, once finished, what it deleted (per-table row counts, the objects) and the
-- holds that kept any part of it. request_key makes every entry point idempotent: the
-- same request twice is one erasure. Added tables only.
CREATE TABLE IF NOT EXISTS retention.erasures (
    erasure_id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_key    text        NOT NULL UNIQUE,
    policy         text        NOT NULL,
    scope          text        NOT NULL CHECK (scope IN ('tenant', 'key', 'object')),
    value          text        NOT NULL CHECK (value <> ''),
    reason         text        NOT NULL CHECK (btrim(reason) <> ''),
    requested_by   text        NOT NULL,
    requested_at   timestamptz NOT NULL DEFAULT now(),
    deadline       timestamptz NOT NULL DEFAULT now() + interval '30 days',
    state          text        NOT NULL DEFAULT 'requested'
                   CHECK (state IN ('requested', 'running', 'done', 'blocked_by_hold', 'failed')),
    started_at     timestamptz,
    finished_at    timestamptz,
    rows_deleted   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    objects        jsonb       NOT NULL DEFAULT '[]'::jsonb,
    blocking_holds jsonb       NOT NULL DEFAULT '[]'::jsonb,
    error          text,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- The work list (requested or running, oldest first) and the late-erasure alert's scan.
CREATE INDEX IF NOT EXISTS erasures_open ON retention.erasures (deadline)
    WHERE state IN ('requested', 'running');
CREATE INDEX IF NOT EXISTS erasures_policy ON retention.erasures (policy, requested_at);

-- The alert ledger takes a late erasure as a kind of its own (keyed by the erasure as
-- its run_id), so one late erasure alerts once.
ALTER TABLE retention.alerts DROP CONSTRAINT IF EXISTS alerts_kind_check;
ALTER TABLE retention.alerts ADD CONSTRAINT alerts_kind_check
    CHECK (kind IN ('dirty', 'lag', 'dead_letters', 'failure', 'deadline', 'erasure_late'));
