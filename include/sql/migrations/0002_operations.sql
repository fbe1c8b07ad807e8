-- Migration 0002: the remote-deletion ledger, its attempt history, the shared
-- token buckets, replay audit, and the dead-letter view.
--
-- retention.operations has one row per intended remote deletion, keyed by a
-- deterministic operation_key (policy, revision, table, row key, version), so
-- re-enqueueing is a no-op and a restored-then-expired object gets a new key.
-- It stores identifiers only: no payloads, no customer data.
CREATE TABLE IF NOT EXISTS retention.operations (
    operation_key     text        PRIMARY KEY,
    policy            text        NOT NULL,
    policy_revision   integer     NOT NULL,
    table_name        text        NOT NULL,
    row_key           bigint      NOT NULL,
    object_id         text        NOT NULL,
    tenant            text,
    version           text        NOT NULL,
    window_key        text,
    state             text        NOT NULL DEFAULT 'pending'
                      CHECK (state IN ('pending', 'in_flight', 'done', 'dead')),
    attempt_count     integer     NOT NULL DEFAULT 0,
    claim_count       integer     NOT NULL DEFAULT 0,
    rate_limited_count integer    NOT NULL DEFAULT 0,
    auth_failure_count integer    NOT NULL DEFAULT 0,
    lease_expiries    integer     NOT NULL DEFAULT 0,
    not_before        timestamptz NOT NULL DEFAULT now(),
    lease_owner       text,
    lease_expires_at  timestamptz,
    last_status_code  integer,
    outcome_class     text,
    failure_class     text,
    reason            text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    done_at           timestamptz
);

CREATE INDEX IF NOT EXISTS operations_pending
    ON retention.operations (policy, not_before) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS operations_leased
    ON retention.operations (policy, lease_expires_at) WHERE state = 'in_flight';
CREATE INDEX IF NOT EXISTS operations_window_pending
    ON retention.operations (window_key, not_before) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS operations_window_leased
    ON retention.operations (window_key, lease_expires_at) WHERE state = 'in_flight';
CREATE INDEX IF NOT EXISTS operations_dead ON retention.operations (policy, failure_class)
    WHERE state = 'dead';

-- One row per deliberate API attempt (no request or response bodies).
CREATE TABLE IF NOT EXISTS retention.attempts (
    operation_key  text        NOT NULL,
    attempt_no     integer     NOT NULL,
    policy         text        NOT NULL,
    lease_owner    text        NOT NULL,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz NOT NULL,
    status_code    integer,
    outcome_class  text        NOT NULL,
    duration_ms    double precision NOT NULL,
    PRIMARY KEY (operation_key, attempt_no)
);
CREATE INDEX IF NOT EXISTS attempts_policy_time ON retention.attempts (policy, finished_at);

-- Token buckets shared by every worker of a limiter scope. effective_rate is
-- the AIMD rate: halved on an unexpected 429, climbing back linearly to the
-- configured ceiling (rate_per_second).
CREATE TABLE IF NOT EXISTS retention.rate_limiters (
    scope             text        PRIMARY KEY,
    rate_ceiling      double precision NOT NULL CHECK (rate_ceiling > 0),
    effective_rate    double precision NOT NULL CHECK (effective_rate > 0),
    min_rate          double precision NOT NULL CHECK (min_rate > 0),
    burst             double precision NOT NULL CHECK (burst >= 1),
    recovery_seconds  double precision NOT NULL DEFAULT 60,
    tokens            double precision NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    closed_until      timestamptz NOT NULL DEFAULT '-infinity',
    last_decrease_at  timestamptz NOT NULL DEFAULT '-infinity',
    granted_total     bigint      NOT NULL DEFAULT 0,
    throttled_total   bigint      NOT NULL DEFAULT 0
);

-- Take one token of a scope, or say how long to wait. Locks the scope's row
-- for the length of one statement; callers sleep outside any transaction.
CREATE OR REPLACE FUNCTION retention.take_token(
    p_scope text,
    OUT granted boolean,
    OUT wait_seconds double precision,
    OUT effective_rate double precision
) LANGUAGE plpgsql AS $fn$
DECLARE
    r retention.rate_limiters%ROWTYPE;
    t timestamptz;
    elapsed double precision;
    rate double precision;
    available double precision;
BEGIN
    SELECT * INTO r FROM retention.rate_limiters WHERE scope = p_scope FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'retention: no rate limiter for scope %', p_scope;
    END IF;
    t := clock_timestamp();
    IF r.closed_until > t THEN
        granted := false;
        wait_seconds := extract(epoch FROM r.closed_until - t);
        effective_rate := r.effective_rate;
        RETURN;
    END IF;
    elapsed := greatest(0, extract(epoch FROM t - r.updated_at));
    rate := least(
        r.rate_ceiling,
        r.effective_rate + elapsed * r.rate_ceiling / r.recovery_seconds
    );
    available := least(r.burst, r.tokens + elapsed * rate);
    effective_rate := rate;
    IF available >= 1 THEN
        granted := true;
        wait_seconds := 0;
        available := available - 1;
    ELSE
        granted := false;
        wait_seconds := (1 - available) / rate;
    END IF;
    UPDATE retention.rate_limiters
    SET tokens = available,
        effective_rate = rate,
        updated_at = t,
        granted_total = granted_total + granted::int
    WHERE scope = p_scope;
END
$fn$;

-- The API said 429 (or 503 with Retry-After) although the bucket allowed the
-- call: close the scope until the time it named, empty the bucket, and halve
-- the effective rate (at most once per second, so simultaneous 429s of several
-- workers count as one signal).
CREATE OR REPLACE FUNCTION retention.throttle_scope(
    p_scope text,
    p_retry_after_seconds double precision
) RETURNS double precision LANGUAGE plpgsql AS $fn$
DECLARE
    t timestamptz := clock_timestamp();
    reopen timestamptz := clock_timestamp() + make_interval(secs => p_retry_after_seconds);
    rate double precision;
BEGIN
    UPDATE retention.rate_limiters
    SET closed_until = greatest(closed_until, reopen),
        tokens = 0,
        updated_at = greatest(updated_at, reopen),
        effective_rate = CASE
            WHEN last_decrease_at < t - interval '1 second'
            THEN greatest(min_rate, effective_rate / 2)
            ELSE effective_rate END,
        last_decrease_at = CASE
            WHEN last_decrease_at < t - interval '1 second' THEN t
            ELSE last_decrease_at END,
        throttled_total = throttled_total + 1
    WHERE scope = p_scope
    RETURNING effective_rate INTO rate;
    RETURN rate;
END
$fn$;

-- Every replay of dead operations, for audit.
CREATE TABLE IF NOT EXISTS retention.replays (
    replay_id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    policy          text        NOT NULL,
    requested_by    text        NOT NULL,
    reason          text,
    filters         jsonb       NOT NULL,
    operation_keys  text[]      NOT NULL,
    replayed_at     timestamptz NOT NULL DEFAULT now()
);

CREATE OR REPLACE VIEW retention.dead_operations AS
SELECT operation_key, policy, tenant, object_id, row_key, version, failure_class,
       last_status_code, reason, attempt_count, claim_count, window_key,
       created_at, updated_at AS dead_since
FROM retention.operations
WHERE state = 'dead';

-- Remote policies can end a run with an explained backlog (pending operations
-- waiting for their not_before, or dead ones waiting for review).
ALTER TABLE retention.runs DROP CONSTRAINT IF EXISTS runs_status_check;
ALTER TABLE retention.runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('planned', 'clean', 'backlog', 'dirty', 'dry_run'));
