"""Sending alerts: read a finished run's facts, claim each alert in the ledger, send it once.

A run is told about at most once per kind (``dirty``, ``lag``,
``dead_letters``, ``failure``, ``deadline``), never once per window: the
``send_alerts`` task evaluates the whole run after ``reconcile``, and every
send goes through a claim row of ``retention.alerts`` (unique per policy, run
and kind) taken before the HTTP call. A claim that was answered 2xx is never
sent again; a failed one, or one whose claimer died before recording the
answer, is sent again by the next try: at-least-once after the claim, because
a lost alert is worse than a repeated one, yet a retried task never repeats
an alert that got through.

What fires (each only when its connection is named in ``alerts:``):

- ``dirty``: reconcile recorded the run as ``dirty``;
- ``failure``: a task of the run failed (or could not run because one
  upstream failed); a dirty run goes to ``on_dirty`` instead when that is set,
  so one cause is told once;
- ``lag``: the oldest row still older than the cutoff became eligible more
  than ``lag_minutes`` ago (not sent for a run told as dirty: that message
  carries the lag too);
- ``dead_letters``: operations or events went dead during this run (since
  it was planned); earlier dead letters are counted in the message but do
  not fire again;
- ``deadline``: the run is still going ``deadline_minutes`` after it was
  queued (sent by the Deadline Alert's callback, see
  ``retention.airflow.alerts``).

A dry run deletes and calls nothing, so it only tells of failures.

The rules and the messages are pure (``retention.alerts.messages``);
this module reads the run's facts and keeps the ledger, taking a connection,
an :class:`HttpSender` and plain values. The Airflow side (connections, task
states, the deadline callback) lives in ``retention.airflow.alerts``.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Literal

from psycopg.types.json import Jsonb

from retention.alerts.messages import Alert, AlertKind, DeadLetters, RunFacts
from retention.db.connection import Connection
from retention.db.oldest import oldest_eligible
from retention.db.sqlfiles import query
from retention.policy.model import Policy
from retention.queue.http import HttpSender

FORMAT_EXTRA = "format"  # connection extra: "slack" for Slack's incoming-webhook shape
ENDPOINT_EXTRA = "endpoint"  # connection extra: the path POSTed to (default: the host URL)
ALERT_TIMEOUT_SECONDS = 10.0
# A claim older than this whose answer was never recorded is sent again (the claimer
# died between claim and answer); it outlasts one send with its timeout.
STALE_CLAIM_SECONDS = 3 * ALERT_TIMEOUT_SECONDS
FAILED_STATES = frozenset({"failed", "upstream_failed"})


@dataclass(frozen=True)
class AlertOutcome:
    """What became of one alert: sent, failed (to be sent again), or already claimed."""

    kind: AlertKind
    conn_id: str
    state: Literal["sent", "failed", "already_claimed"]
    status_code: int | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}


def send_once(
    conn: Connection,
    sender: HttpSender,
    *,
    endpoint: str,
    policy: str,
    run_id: str,
    alert: Alert,
    body: dict[str, Any],
) -> AlertOutcome:
    """Claim the alert's ledger row, POST it if the claim was ours, record the answer.

    The claim commits before the call and the answer after it (two short
    transactions around the remote call, never one around it).
    """
    keys = {"policy": policy, "run_id": run_id, "kind": alert.kind}
    claimed = conn.execute(
        query("alert_claim"),
        {
            **keys,
            "conn_id": alert.conn_id,
            "message": Jsonb(body),
            "stale_seconds": STALE_CLAIM_SECONDS,
        },
    ).fetchone()
    if claimed is None:
        return AlertOutcome(alert.kind, alert.conn_id, "already_claimed")
    result = sender.send(
        "POST",
        endpoint,
        headers={"Content-Type": "application/json"},
        body=json.dumps(body, default=str).encode(),
    )
    ok = result.status is not None and 200 <= result.status < 300
    error = None if ok else (result.error or f"HTTP {result.status}")
    if error == "connection":
        error = "no response (connection refused or reset)"
    elif error == "timeout":
        error = f"no response within {sender.timeout_seconds:g} s"
    state: Literal["sent", "failed"] = "sent" if ok else "failed"
    conn.execute(
        query("alert_record"),
        {**keys, "status": state, "status_code": result.status, "error": error},
    )
    return AlertOutcome(alert.kind, alert.conn_id, state, result.status, error)


def read_run_facts(
    conn: Connection,
    policy: Policy,
    run_id: str,
    *,
    failed_tasks: tuple[str, ...],
    dry_run: bool,
    url: str | None,
    now: dt.datetime | None = None,
) -> RunFacts:
    """The run's summary, its lag and its new dead letters, read from the policy's database
    at ``now`` (default: the clock)."""
    now = now or dt.datetime.now(dt.UTC)
    run = conn.execute(query("run_for_id"), {"policy": policy.name, "run_id": run_id}).fetchone()
    summary = run["summary"] if run else None
    lag_hours = None
    dead = DeadLetters()
    if run is not None:
        dry_run = bool(run["dry_run"])
        lag_hours = _lag_hours(conn, policy, run["cutoff"], now)
        row = conn.execute(
            query("dead_letter_counts"), {"policy": policy.name, "since": run["planned_at"]}
        ).fetchone()
        assert row is not None
        dead = DeadLetters(
            new_operations=int(row["new_operations"]),
            new_operations_by_class=dict(row["new_operations_by_class"]),
            dead_operations=int(row["dead_operations"]),
            new_events=int(row["new_events"]),
            dead_events=int(row["dead_events"]),
        )
    return RunFacts(
        policy=policy.name,
        dag_id=policy.dag_id,
        run_id=run_id,
        summary=summary,
        failed_tasks=failed_tasks,
        lag_hours=lag_hours,
        dead=dead,
        dry_run=dry_run,
        run_url=url,
        now=now,
    )


def _lag_hours(
    conn: Connection, policy: Policy, cutoff: dt.datetime, now: dt.datetime
) -> float | None:
    """Hours since the oldest row older than the cutoff became eligible (None: no such row)."""
    oldest = oldest_eligible(conn, policy, cutoff)
    if oldest is None:
        return None
    eligible_since = oldest + dt.timedelta(days=policy.retain_days)
    return max(0.0, (now - eligible_since).total_seconds() / 3600)


def read_run_progress(conn: Connection, policy: str, run_id: str) -> dict[str, Any] | None:
    """How far a run has come (None before it is planned), for the deadline message."""
    return conn.execute(query("run_progress"), {"policy": policy, "run_id": run_id}).fetchone()


def purge_old_alerts(conn: Connection, policy: str, audit_days: int) -> int:
    """Forget the policy's alert ledger rows older than its ``audit_days``."""
    return conn.execute(query("alert_purge"), {"policy": policy, "days": audit_days}).rowcount
