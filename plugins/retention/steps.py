"""The work of each DAG task, given plain values taken from the Airflow context.

The DAG file only reads the context and calls these; each opens its own
connection through the policy's Airflow connection and closes it again.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from retention import cutoff as cutoff_rules
from retention.audit import purge_audit
from retention.db import Connection, connect
from retention.deleter import WindowResult, delete_window, finish_window
from retention.http_client import RemoteClient
from retention.migrate import migrate
from retention.operations import enqueue_window, next_due
from retention.outbox import EventSender, deliver_events
from retention.planner import PlanRequest, plan_id_for, plan_windows
from retention.policy import Policy
from retention.reconcile import raise_if_dirty, reconcile_run
from retention.remote_worker import RemoteWorker
from retention.sqlfiles import query
from retention.windows import Window

log = logging.getLogger(__name__)

WINDOW_ROWS_BOUNDS = (1, 10_000_000)
BATCH_ROWS_BOUNDS = (1, 100_000)


@dataclass(frozen=True)
class RunSettings:
    """A run's choices: the policy's sizes unless the trigger form overrides them."""

    dry_run: bool
    window_rows: int
    batch_rows: int


def run_settings(policy: Policy, params: dict[str, Any]) -> RunSettings:
    """Resolve trigger-form params against the policy; errors name the param."""
    window_rows = params.get("window_rows") or policy.window_rows
    batch_rows = params.get("batch_rows") or policy.batch_rows
    for name, value, (low, high) in (
        ("window_rows", window_rows, WINDOW_ROWS_BOUNDS),
        ("batch_rows", batch_rows, BATCH_ROWS_BOUNDS),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(
                f"param {name!r} must be a whole number in [{low}, {high}], got {value!r}"
            )
    if batch_rows > window_rows:
        raise ValueError(
            f"param 'batch_rows' ({batch_rows}) is larger than window_rows ({window_rows}) "
            f"for policy {policy.name!r}"
        )
    return RunSettings(bool(params.get("dry_run", False)), window_rows, batch_rows)


def compute_cutoff_step(
    policy: Policy,
    *,
    data_interval_end: dt.datetime | None,
    logical_date: dt.datetime | None,
    run_after: dt.datetime | None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The run's cutoff and where its anchor came from (an XCom-friendly dict)."""
    source, anchor = cutoff_rules.choose_anchor(data_interval_end, logical_date, run_after)
    cutoff = cutoff_rules.compute_cutoff(anchor, policy.retain_days, now or dt.datetime.now(dt.UTC))
    log.info(
        "policy %s: cutoff %s = %s %s minus %d days",
        policy.name,
        cutoff.isoformat(),
        source,
        anchor.isoformat(),
        policy.retain_days,
    )
    return {
        "cutoff": cutoff.isoformat(),
        "anchor_source": source,
        "anchor": anchor.isoformat(),
        "logical_date": logical_date.isoformat() if logical_date else None,
    }


def plan_windows_step(
    policy: Policy,
    *,
    run_id: str,
    dag_run_moments: tuple[dt.datetime | None, ...],
    cutoff: dict[str, Any],
    settings: RunSettings,
    max_windows: int,
) -> list[dict[str, Any]]:
    """Migrate the ledger, plan (or reload) the run's windows; one kwargs dict per window."""
    with connect(policy.postgres_conn_id) as conn:
        migrate(conn)
        windows = plan_windows(
            conn,
            PlanRequest(
                policy=policy,
                run_id=run_id,
                plan_id=plan_id_for(run_id, *dag_run_moments),
                cutoff=dt.datetime.fromisoformat(cutoff["cutoff"]),
                anchor_source=cutoff["anchor_source"],
                logical_date=(
                    dt.datetime.fromisoformat(cutoff["logical_date"])
                    if cutoff["logical_date"]
                    else None
                ),
                window_rows=settings.window_rows,
                batch_rows=settings.batch_rows,
                max_windows=max_windows,
                dry_run=settings.dry_run,
            ),
        )
    log.info(
        "policy %s: %d windows, %d eligible rows planned (window_rows=%d, dry_run=%s)",
        policy.name,
        len(windows),
        sum(w.expected_rows for w in windows),
        settings.window_rows,
        settings.dry_run,
    )
    return [{"window": w.to_xcom()} for w in windows]


def delete_window_step(
    policy: Policy, *, window: dict[str, Any], settings: RunSettings
) -> dict[str, Any]:
    """Delete (or count, in a dry run) one window; remote policies go through the ledger."""
    with connect(policy.postgres_conn_id) as conn:
        if policy.remote is not None and not settings.dry_run:
            return delete_remote_window(conn, policy, Window.from_xcom(window), settings)
        result = delete_window(
            conn,
            policy,
            Window.from_xcom(window),
            batch_rows=settings.batch_rows,
            dry_run=settings.dry_run,
        )
    return result.as_dict()


def delete_remote_window(
    conn: Connection, policy: Policy, window: Window, settings: RunSettings
) -> dict[str, Any]:
    """Enqueue the window's operations, then work them until done or out of time."""
    started = time.perf_counter()
    result = WindowResult(window_key=window.window_key)
    conn.execute(query("window_start"), {"window_key": window.window_key})
    try:
        enqueued = enqueue_window(conn, policy, window, settings.batch_rows)
        with closing(RemoteClient(policy.remote)) as client:  # type: ignore[arg-type]
            stats = RemoteWorker(conn, policy, client).run(window_key=window.window_key)
    except Exception as exc:
        result.seconds = time.perf_counter() - started
        finish_window(conn, window, result, state="failed", error=exc)
        raise
    _, left = next_due(conn, window.window_key)
    conn.execute(
        query("window_batch_done"),
        {"window_key": window.window_key, "deleted": stats.rows_deleted, "batch_ms": 0.0},
    )
    result.seconds = time.perf_counter() - started
    backlog = f"{left} operations left pending (backlog)" if left else None
    finish_window(conn, window, result, state="done", error=backlog)
    return {"window_key": window.window_key, "enqueued": enqueued, **stats.as_dict()}


def drain_operations_step(policy: Policy) -> dict[str, Any]:
    """Work pending operations of any window whose not_before has passed (left by earlier runs),
    after delivering events left over from earlier runs."""
    assert policy.remote is not None
    with connect(policy.postgres_conn_id) as conn:
        migrate(conn)
        events = _deliver(conn, policy) if policy.notify else None
        budget = policy.remote.task_budget_seconds
        with closing(RemoteClient(policy.remote)) as client:
            stats = RemoteWorker(conn, policy, client, budget_seconds=budget).run(window_key=None)
    return {**stats.as_dict(), "events": events}


def deliver_events_step(policy: Policy) -> dict[str, Any]:
    """Deliver the policy's pending retention.deleted events (signed webhooks)."""
    with connect(policy.postgres_conn_id) as conn:
        return _deliver(conn, policy)


def _deliver(conn: Connection, policy: Policy) -> dict[str, Any]:
    assert policy.notify is not None
    assert policy.remote is not None
    budget = policy.remote.task_budget_seconds
    with closing(EventSender(policy.notify)) as sender:
        return deliver_events(conn, policy, sender, budget_seconds=budget).as_dict()


def purge_audit_step(policy: Policy) -> dict[str, Any]:
    """Purge the policy's evidence older than ``audit_days`` (bounded batches)."""
    with connect(policy.postgres_conn_id) as conn:
        migrate(conn)
        return purge_audit(conn, policy)


def reconcile_step(policy: Policy, *, run_id: str) -> dict[str, Any]:
    """Record and return the run summary; raise when rows remain unexplained."""
    with connect(policy.postgres_conn_id) as conn:
        summary = reconcile_run(conn, policy, run_id)
    log.info("policy %s run summary: %s", policy.name, summary)
    raise_if_dirty(summary)
    return summary
