"""The work of each DAG task, given plain values taken from the Airflow context.

The DAG factory only reads the context and calls these; each opens its own
connection through the policy's Airflow connection and closes it again.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from functools import partial
from typing import Any

import psycopg
from airflow.sdk import Variable
from airflow.sdk.observability import stats

from retention import metrics
from retention.airflow.alerts import deliver
from retention.airflow.connections import http_sender, postgres, signing_secret
from retention.airflow.pools import pool_watch
from retention.alerts.messages import erasure_late_alert
from retention.db.gate import PAUSE_VARIABLE, Gate
from retention.db.migrate import migrate
from retention.db.sqlfiles import query
from retention.db.table_check import check_table
from retention.erasures.process import process_erasure, record_failed_pass
from retention.erasures.request import (
    ERASURE_DAG_ID,
    FAILED_ALERT_WINDOW,
    ErasureState,
    list_erasures,
)
from retention.events.outbox import Signer, deliver_events
from retention.evidence.audit import purge_audit, purge_removed_policies
from retention.evidence.reconcile import RunNotPlanned, raise_if_dirty, reconcile
from retention.evidence.report import format_summary
from retention.holds.store import release_held_operations
from retention.objects.deleter import ObjectDeleter, work_operations
from retention.objects.kind import ObjectKind, OperationsKind
from retention.policy.model import NotifySpec, Policy
from retention.policy.params import RunSettings
from retention.queue.worker import stats_of
from retention.rows.children import check_coupled_tables
from retention.rows.cutoff import checked_cutoff, run_cutoff
from retention.rows.deleter import RowDeleter
from retention.rows.lifecycle import WindowDeleter
from retention.rows.partitions import drop_expired_partitions
from retention.rows.planner import PlanRequest, plan_id_for, plan_windows
from retention.rows.statistics import refresh_statistics
from retention.rows.windows import Window
from retention.runs.lease import (
    LeaseOutcome,
    RunState,
    Turn,
    close_stale_windows,
    release_run_lease,
    take_run_lease,
)
from retention.stopping import StopRequested, graceful_stop, raise_if_stopping

log = logging.getLogger(__name__)
metrics.install(stats)  # retention's metrics go through Airflow's stats facade (retention.metrics)

DEFAULT_AUDIT_DAYS = Policy.model_fields["audit_days"].default


class DatabaseLost(RuntimeError):
    """The connection to the policy's database broke in the middle of a task."""


@contextmanager
def database_loss_explained(conn_id: str, what: str) -> Iterator[None]:
    """Turn a broken connection into a message that says what happened and what comes next."""
    try:
        yield
    except psycopg.OperationalError as lost:
        raise DatabaseLost(
            f"the connection {conn_id!r} to the database was lost during {what} ({lost}). "
            "Committed batches stay deleted and counted, an uncommitted one is rolled back, "
            "and leased operations are re-driven with the same keys once their leases expire. "
            "Airflow retries this task, which resumes where it stopped."
        ) from lost


def deleter_for(policy: Policy) -> WindowDeleter:
    """The window strategy of a policy, chosen once when its DAG is built."""
    if policy.remote is None:
        return RowDeleter(
            policy.table_spec,
            policy.timeouts,
            policy.batch_timing,
            policy.health,
            switch=read_pause_switch,
            policy=policy,
        )
    return ObjectDeleter(
        policy.table_spec,
        policy.timeouts,
        policy=policy,
        open_kind=partial(open_kind, policy),
        switch=read_pause_switch,
        open_pool=partial(pool_watch, policy.remote.pool, policy.pool_slots),
    )


def open_kind(policy: Policy) -> ObjectKind:
    """The policy's kind of remote object with its transport open: the one place a kind is
    chosen (today every remote policy deletes over HTTP through its connection)."""
    remote = policy.remote
    assert remote is not None
    return OperationsKind(policy, http_sender(remote.http_conn_id, remote.request_timeout_seconds))


def read_pause_switch() -> str | None:
    """The Variable ``retention_pause`` now (read at run time, between batches, never at parse)."""
    return Variable.get(PAUSE_VARIABLE, default=None)


def migrate_schema_step(conn_id: str, policy: Policy | None = None) -> dict[str, Any]:
    """Check that the policy's table has every column the policy names (when a policy is
    given: the first task of its run), then apply pending migrations of the ``retention``
    schema (under an advisory lock).

    The check comes first so that a misspelt column fails the run before anything is
    written, with :class:`~retention.db.table_check.TableMismatch` (no retry can mend it);
    so does a foreign key referencing the policy's rows that the policy does not account
    for (:func:`~retention.rows.children.check_coupled_tables`).
    """
    with postgres(conn_id) as conn:
        if policy is not None:
            columns = check_table(conn, policy)
            log.info(
                "policy %s: table %s has every column the policy names (%s)",
                policy.name,
                policy.table,
                ", ".join(
                    f"{field} {column} ({columns[column]})"
                    for field, column in policy.named_columns().items()
                ),
            )
            coupling = check_coupled_tables(conn, policy)
            for link in coupling.links:
                log.info(
                    "policy %s: child %s.%s → %s.%s (%s), deleted with its parents",
                    policy.name,
                    link.table,
                    link.foreign_key,
                    link.parent_table,
                    link.parent_column,
                    f"foreign key {link.constraint}"
                    if link.constraint
                    else "no foreign key constraint: reconcile counts orphans",
                )
            for warning in coupling.warnings():
                log.warning("policy %s: %s", policy.name, warning)
        applied = migrate(conn)
    log.info("retention schema: %s", f"applied {applied}" if applied else "up to date")
    return {"applied": applied}


def compute_cutoff_step(
    policy: str,
    retain_days: int,
    *,
    data_interval_end: dt.datetime | None,
    logical_date: dt.datetime | None,
    run_after: dt.datetime | None,
) -> dict[str, Any]:
    """The run's cutoff (see ``retention.rows.cutoff``), logged with its anchor."""
    result = run_cutoff(
        retain_days,
        data_interval_end=data_interval_end,
        logical_date=logical_date,
        run_after=run_after,
        now=dt.datetime.now(dt.UTC),
    )
    log.info(
        "policy %s: cutoff %s = %s %s minus %d days",
        policy,
        result["cutoff"],
        result["anchor_source"],
        result["anchor"],
        retain_days,
    )
    return result


def turn_of(policy: Policy, cutoff: dict[str, Any], task: str) -> Turn:
    """The run's place in the line for the run lease: its cutoff and logical date."""
    logical = cutoff.get("logical_date")
    return Turn(
        cutoff_from_xcom(policy, cutoff, task),
        dt.datetime.fromisoformat(logical) if logical else None,
    )


def cutoff_from_xcom(policy: Policy, cutoff: dict[str, Any], task: str) -> dt.datetime:
    """The cutoff ``compute_cutoff`` handed on, checked again where it is used: an XCom can be
    cleared, edited or left from an older run, and no row younger than ``retain_days`` may
    become eligible whatever the XCom says."""
    return checked_cutoff(
        cutoff["cutoff"],
        policy.retain_days,
        now=dt.datetime.now(dt.UTC),
        where=f"policy {policy.name!r}, task {task}",
    )


def drop_partitions_step(
    policy: Policy,
    *,
    run_id: str,
    cutoff: dict[str, Any],
    settings: RunSettings,
    run_state: RunState,
) -> dict[str, Any]:
    """The partition fast path: detach (and drop) partitions wholly older than the cutoff.

    Like a window, it runs only while its run holds the policy's run lease, or takes it
    when free (a cleared task of an old run): never next to another run's deletions.
    """
    with (
        database_loss_explained(policy.postgres_conn_id, "the partition step"),
        postgres(policy.postgres_conn_id) as conn,
    ):
        lease = take_run_lease(
            conn,
            policy.name,
            policy.dag_id,
            run_id,
            run_state,
            turn=turn_of(policy, cutoff, "drop_partitions"),
        )
        if not lease.taken:
            raise RunLeaseHeld(
                f"drop_partitions of run {run_id} did not run: "
                + lease.message(policy.name)
                + ". Clear this task again once that run has finished."
            )
        types = check_table(conn, policy)
        result = drop_expired_partitions(
            conn,
            policy,
            run_id,
            cutoff_from_xcom(policy, cutoff, "drop_partitions"),
            column_type=types[policy.table_spec.timestamp_column],
            dry_run=settings.dry_run,
        )
    log.info("policy %s: partitions: %s", policy.name, result)
    return result


def plan_windows_step(
    policy: Policy,
    *,
    run_id: str,
    dag_run_moments: tuple[dt.datetime | None, ...],
    cutoff: dict[str, Any],
    settings: RunSettings,
    max_windows: int,
    min_windows: int = 1,
) -> list[dict[str, Any]]:
    """Plan (or reload) the run's windows; one kwargs dict per window."""
    with postgres(policy.postgres_conn_id) as conn:
        windows = plan_windows(
            conn,
            PlanRequest(
                policy=policy,
                run_id=run_id,
                plan_id=plan_id_for(run_id, *dag_run_moments),
                cutoff=cutoff_from_xcom(policy, cutoff, "plan_windows"),
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
                min_windows=min_windows,
            ),
        )
    log.info(
        "policy %s: %d windows, about %d eligible rows (an estimate; window_rows=%s, dry_run=%s)",
        policy.name,
        len(windows),
        sum(w.expected_rows for w in windows),
        settings.window_rows or "sized by time",
        settings.dry_run,
    )
    return [{"window": w.to_xcom()} for w in windows]


class RunLeaseHeld(RuntimeError):
    """Another run of the policy holds the run lease: this task must not delete now."""


def take_run_lease_step(
    policy: Policy,
    *,
    run_id: str,
    run_state: RunState,
    cutoff: dict[str, Any],
    earlier: str | None,
    stale_seconds: float,
) -> LeaseOutcome:
    """Take the policy's run lease when it is this run's turn (or report the run holding it,
    or the waiting run that goes first); see ``runs.lease``."""
    with postgres(policy.postgres_conn_id) as conn:
        outcome = take_run_lease(
            conn,
            policy.name,
            policy.dag_id,
            run_id,
            run_state,
            turn=turn_of(policy, cutoff, "take_run_lease"),
            waits=True,
            earlier=earlier,
            stale_seconds=stale_seconds,
        )
    if not outcome.taken:
        log.warning(outcome.message(policy.name))
    return outcome


def delete_window_step(
    conn_id: str,
    deleter: WindowDeleter,
    *,
    window: dict[str, Any],
    settings: RunSettings,
    dag_id: str,
    run_state: RunState,
    retain_days: int,
) -> dict[str, Any]:
    """Delete (or count, in a dry run) one window with the policy's strategy.

    The window's run must hold the policy's run lease, or take it when free (a
    window of an earlier run cleared and rerun): never two runs at once. Its
    cutoff, handed on by ``plan_windows``, is checked against ``now − retain_days``
    once more before anything is deleted.
    """
    chosen = Window.from_xcom(window)
    checked_cutoff(
        chosen.cutoff,
        retain_days,
        now=dt.datetime.now(dt.UTC),
        where=f"policy {chosen.policy!r}, window {chosen.label} of run {chosen.run_id}",
    )
    with (
        database_loss_explained(conn_id, f"window {chosen.label}"),
        postgres(conn_id) as conn,
        graceful_stop(conn),
    ):
        lease = take_run_lease(
            conn, chosen.policy, dag_id, chosen.run_id, run_state, turn=Turn(chosen.cutoff)
        )
        if not lease.taken:
            raise RunLeaseHeld(
                f"window {chosen.label} of run {chosen.run_id} did not run: "
                + lease.message(chosen.policy)
                + ". Clear this task again once that run has finished."
            )
        raise_if_stopping(f"window {chosen.label}")  # told to stop while taking the lease
        result = deleter.run(conn, chosen, batch_rows=settings.batch_rows, dry_run=settings.dry_run)
    return result.as_dict()


def drain_operations_step(policy: Policy, run_id: str) -> dict[str, Any]:
    """One bounded pass over pending operations of any window whose not_before has passed.

    Each pass (a retry is another pass) is appended to the run's row, or its
    error when it failed: reconcile counts the passes' deletions in the run's
    ``rows_deleted`` (after a replay, most of a run's work is here).
    """
    assert policy.remote is not None
    with (
        database_loss_explained(policy.postgres_conn_id, "the drain step"),
        postgres(policy.postgres_conn_id) as conn,
        closing(open_kind(policy)) as kind,
    ):
        gate = Gate(policy.name, policy.health, policy.table_spec, read_pause_switch)
        outcome: dict[str, Any] = {}
        try:
            # held operations no hold of ours keeps (the remote side held them, or a
            # hold_column was cleared) are re-checked: pending, screened again just
            # before their call
            rechecked = release_held_operations(conn, policy.name)
            with graceful_stop(conn):
                stats = work_operations(
                    conn, kind, gate=gate, pool=pool_watch(policy.remote.pool, policy.pool_slots)
                )
            outcome = {**stats.as_dict(), "pause": gate.totals(), "held_rechecked": rechecked}
            return outcome
        except BaseException as failed:  # a task timeout too: the pass is recorded either way
            done = stats_of(failed)
            outcome = {
                **(done.as_dict() if done else {}),
                "error": f"{type(failed).__name__}: {failed}"[:500],
                "pause": gate.totals(),
            }
            raise
        finally:
            try:
                conn.execute(
                    query("run_record_drain"),
                    {"policy": policy.name, "run_id": run_id, "drain": json.dumps(outcome)},
                )
            except psycopg.Error:  # never hide the pass's own error behind this one
                log.exception("policy %s: could not record what drain_operations did", policy.name)


class DeliveryIncomplete(RuntimeError):
    """Events went dead, or the receiver is disabled: the run must not look green."""


def deliver_events_step(policy: Policy, run_id: str, *, dry_run: bool) -> dict[str, Any]:
    """Deliver the policy's pending retention.deleted events (signed webhooks).

    Fails (without retries, which cannot help) when events went dead in this
    pass or the receiver is disabled by a 410, naming what to do. What happened
    (figures or the error) is written to the run's row for reconcile, which
    runs next and makes the run dirty when delivery failed.
    """
    assert policy.notify is not None
    notify = policy.notify
    outcome: dict[str, Any] = {"skipped": "dry run: nothing is delivered"} if dry_run else {}
    try:
        if not dry_run:
            outcome = _deliver(policy, notify)
        return outcome
    except Exception as failed:
        outcome = {"error": f"{type(failed).__name__}: {failed}"}
        raise
    finally:
        try:
            with postgres(policy.postgres_conn_id) as conn:
                conn.execute(
                    query("run_record_delivery"),
                    {"policy": policy.name, "run_id": run_id, "delivery": json.dumps(outcome)},
                )
        except psycopg.Error:  # never hide the delivery's own error behind this one
            log.exception("policy %s: could not record what deliver_events did", policy.name)


def _deliver(policy: Policy, notify: NotifySpec) -> dict[str, Any]:
    signer = Signer(signing_secret(notify.http_conn_id), notify.http_conn_id)
    with (
        postgres(policy.postgres_conn_id) as conn,
        closing(http_sender(notify.http_conn_id, notify.timeout_seconds)) as sender,
        graceful_stop(conn),  # SIGTERM: unsent events are handed back
    ):
        stats = deliver_events(conn, policy.name, notify, sender, signer)
    if stats.stopped == "endpoint_disabled":
        raise DeliveryIncomplete(
            f"policy {policy.name!r}: the event receiver of connection "
            f"{notify.http_conn_id!r} answered 410 Gone and is disabled; events stay pending. "
            "Re-enable it once the receiver is back: delete the policy's row of "
            "retention.notify_endpoints."
        )
    if stats.stopped == "unreachable":
        raise DeliveryIncomplete(
            f"policy {policy.name!r}: the event receiver of connection "
            f"{notify.http_conn_id!r} did not answer; no attempt was spent and the events "
            "stay pending for the next run."
        )
    if stats.dead:
        raise DeliveryIncomplete(
            f"policy {policy.name!r}: {stats.dead} retention.deleted event(s) went dead after "
            f"{notify.max_attempts} attempts (statuses {dict(stats.statuses)}); list them in "
            "retention.dead_events and replay them with retention__replay (kind: events)."
        )
    return stats.as_dict()


def purge_audit_step(policy: Policy, current: list[Policy], named: set[str]) -> dict[str, Any]:
    """Purge the policy's evidence older than ``audit_days`` (bounded batches), and that of
    policies no longer named in the file (kept at least as long as any current policy's)."""
    with postgres(policy.postgres_conn_id) as conn:
        purged: dict[str, Any] = purge_audit(conn, policy.name, policy.audit_days)
        longest = max(DEFAULT_AUDIT_DAYS, *(p.audit_days for p in [policy, *current]))
        known = named | {p.name for p in current} | {policy.name}
        purged["removed_policies"] = purge_removed_policies(conn, known, longest)
    return purged


def reconcile_step(policy: Policy, *, run_id: str) -> dict[str, Any]:
    """Record and return the run summary; raise when rows remain unexplained.

    Every window task has ended by now (``all_done``), so a window still
    ``running`` lost its task (SIGKILL, a lost worker): it is closed as
    ``cancelled`` first. The run lease is given back once the summary is
    recorded (clean or dirty, both final). An error Airflow retries (a lost
    connection, a timeout while counting) keeps it: no other run may start
    deleting between this attempt and the retry. If the retries run out, the
    DAG run ends and the next run takes the lease over. Before the lease goes back,
    a run that deleted more than a tenth of the table's estimated rows analyzes it
    (``retention.rows.statistics``), so that the next plan's estimates are fresh.
    """
    with postgres(policy.postgres_conn_id) as conn:
        close_stale_windows(
            conn,
            policy.name,
            only_run=run_id,
            reason="its task ended without closing it (killed, or its worker was lost); "
            "closed by reconcile",
        )
        try:
            summary = reconcile(conn, policy, run_id)
        except RunNotPlanned:  # final: nothing of this run is in flight, let the next go
            release_run_lease(conn, policy.name, run_id)
            raise
        # before the lease goes back, so that the next run plans from fresh statistics
        refresh_statistics(
            conn,
            policy.table_spec,
            policy.timeouts,
            0 if summary.dry_run else summary.rows_deleted,
            enabled=policy.analyze_after,
            who=f"policy {policy.name}",
        )
        if release_run_lease(conn, policy.name, run_id):
            log.info("policy %s: run %s gave the run lease back", policy.name, run_id)
        metrics.emit_run_gauges(conn, policy, summary)
    log.info("policy %s run summary:\n%s", policy.name, format_summary(summary))
    raise_if_dirty(summary)
    return summary.to_json()


def work_erasures_step(policies: list[Policy], budget_seconds: float) -> dict[str, Any]:
    """One pass over every open erasure (requested or running) of these policies, oldest
    deadline first, each through its policy's own deleters (``retention.erasures.process``).
    ``budget_seconds`` bounds the whole pass: each erasure gets what is left of it, and
    those it does not reach wait for the next pass.

    One erasure whose pass fails does not stop the others (``record_failed_pass``:
    an error that may pass is recorded and retried by the next pass, any other fails
    that erasure), and the late alerts are always told. One policy's database that
    does not answer does not stop the others': its erasures stay open for the next
    pass. Either way the task fails at the end, naming them. Each database's pending
    migrations are applied first, as a policy DAG's ``migrate_schema`` does.
    """
    outcomes: list[dict[str, Any]] = []
    failures: list[str] = []
    retrying: list[str] = []
    alerts: list[dict[str, Any]] = []
    pass_ends = time.monotonic() + budget_seconds  # the pass's budget, shared by its erasures
    known = {p.name for p in policies}
    unknown: set[str] = set()  # open erasures of a policy the policies file no longer has
    finished: dict[str, Policy] = {}  # policies with an erasure that ended: their receipts
    by_conn: dict[str, list[Policy]] = {}
    for policy in policies:
        by_conn.setdefault(policy.postgres_conn_id, []).append(policy)
    for conn_id, group in by_conn.items():
        named = {p.name: p for p in group}
        try:
            with postgres(conn_id) as conn, graceful_stop(conn):
                if "retention.erasures" not in _existing_tables(conn):
                    continue  # no policy of this database has migrated to erasures yet
                # what its policies' migrate_schema does first: a pass never works against
                # an older schema (a deploy's new migration that no policy run applied yet);
                # an up-to-date schema is only read
                migrate(conn)
                for erasure in reversed(list_erasures(conn, open_only=True, limit=1000)):
                    policy = named.get(erasure["policy"])
                    if policy is None:
                        if erasure["policy"] not in known:  # nobody will ever work it
                            unknown.add(f"{erasure['erasure_id']} (policy {erasure['policy']!r})")
                        continue  # else another database's policy of the same name: not ours
                    if (left := pass_ends - time.monotonic()) <= 0:
                        break  # the rest wait for the next pass (a minute at most)
                    try:
                        outcome = process_erasure(
                            conn,
                            policy,
                            erasure["erasure_id"],
                            open_kind=partial(open_kind, policy) if policy.remote else None,
                            budget_seconds=left,
                            switch=read_pause_switch,
                        )
                    except StopRequested:
                        raise
                    except Exception as failed:  # this erasure's, not the others': go on
                        log.exception("erasure %d: the pass failed", erasure["erasure_id"])
                        outcome = record_failed_pass(conn, policy, erasure["erasure_id"], failed)
                        if outcome.state in (ErasureState.REQUESTED, ErasureState.RUNNING):
                            retrying.append(f"erasure {outcome.erasure_id}: {outcome.error}")
                    outcomes.append({"policy": policy.name, **outcome.as_dict()})
                    if outcome.state not in (ErasureState.REQUESTED, ErasureState.RUNNING):
                        finished[policy.name] = policy
                alerts += _tell_late_erasures(conn, named)
        except psycopg.Error as failed:
            log.exception("erasures of connection %s: %s", conn_id, failed)
            failures.append(f"{conn_id}: {type(failed).__name__}: {failed}"[:300])
    receipts = {name: _deliver_receipts(policy) for name, policy in finished.items()}
    if failures or retrying:
        raise RuntimeError(
            "erasures could not be worked: "
            + "; ".join([f"connection {failure}" for failure in failures] + retrying)[:3000]
            + ". They stay open and the next pass (within a minute) tries again; the "
            "other erasures were worked and the late ones told."
        )
    if unknown:  # logged, not failed: a database may be shared with another deployment
        log.warning(
            "open erasure(s) %s name a policy the policies file does not have, so no pass "
            "here works them: put the policy back, or mark them failed in "
            "retention.erasures with the reason as their error",
            ", ".join(sorted(unknown)),
        )
    return {
        "erasures": outcomes,
        "late_alerts": alerts,
        "unknown_policy": sorted(unknown),
        "receipts": receipts,
    }


def _deliver_receipts(policy: Policy) -> dict[str, Any]:
    """Deliver the policy's pending events now (its erasures' retention.erased receipts
    among them) rather than at its next scheduled run. A receiver that does not answer
    fails nothing here: the receipts stay in the outbox for the run's deliver_events."""
    if policy.notify is None:
        return {"skipped": "no notify: the receipt is in retention.erasures only"}
    try:
        return _deliver(policy, policy.notify)
    except Exception as failed:  # the erasure is done; its receipt waits in the outbox
        log.warning("policy %s: receipts not delivered now: %s", policy.name, failed)
        return {"error": f"{type(failed).__name__}: {failed}"[:300]}


def _tell_late_erasures(conn: Any, policies: dict[str, Policy]) -> list[dict[str, Any]]:
    """Alert once per erasure that is not done by its deadline (the alert ledger keys the
    claim by the erasure), through its policy's ``alerts:``."""
    told: list[dict[str, Any]] = []
    now = dt.datetime.now(dt.UTC)
    failed_since = now - FAILED_ALERT_WINDOW  # a failed erasure is told too (once)
    for erasure in list_erasures(conn, open_only=True, failed_since=failed_since, limit=1000):
        policy = policies.get(erasure["policy"])
        alert = erasure_late_alert(policy.alerts if policy else None, erasure, now)
        if policy is None or alert is None:
            continue
        outcome = deliver(
            conn,
            alert,
            policy=policy.name,
            dag_id=ERASURE_DAG_ID,
            run_id=f"erasure:{erasure['erasure_id']}",
            url=None,
        )
        told.append({"erasure_id": erasure["erasure_id"], **outcome.as_dict()})
    return told


def _existing_tables(conn: Any) -> set[str]:
    row = conn.execute("SELECT to_regclass('retention.erasures')::text AS erasures").fetchone()
    return {row["erasures"]} if row and row["erasures"] else set()
