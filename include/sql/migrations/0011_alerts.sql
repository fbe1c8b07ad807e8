-- Migration 0011: the alert ledger. One row per (policy, run, kind) makes each
-- alert of a run a claim taken before it is sent, so a retried or duplicated
-- send_alerts task (or a deadline callback run twice) never tells anyone twice
-- once a send was recorded. Added columns only; nothing existing changes.
CREATE TABLE IF NOT EXISTS retention.alerts (
    policy       text        NOT NULL,
    run_id       text        NOT NULL,
    kind         text        NOT NULL
                 CHECK (kind IN ('dirty', 'lag', 'dead_letters', 'failure', 'deadline')),
    conn_id      text        NOT NULL,
    status       text        NOT NULL DEFAULT 'claimed'
                 CHECK (status IN ('claimed', 'sent', 'failed')),
    attempts     integer     NOT NULL DEFAULT 1,
    claimed_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz,
    status_code  integer,
    error        text,
    message      jsonb       NOT NULL,
    PRIMARY KEY (policy, run_id, kind)
);

CREATE INDEX IF NOT EXISTS alerts_claimed_at ON retention.alerts (claimed_at);
