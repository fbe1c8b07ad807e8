"""What the Retention view shows, read from a policy's database at request time.

Every figure comes from one SQL file (``include/sql/ui_*.sql``) and is read
in a short read-only statement bounded by the policy's planning timeouts, so
a page view never holds a lock a deleter waits for. Nothing here imports
Airflow: the view's Airflow side (who may see what, the paused flags) is in
:mod:`retention.airflow.access`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import psycopg

from retention.db.connection import PAGE_STATEMENT_MS, Connection, set_local
from retention.db.oldest import as_aware
from retention.db.sqlfiles import query
from retention.db.table_check import TableFit, table_fit
from retention.erasures.request import list_erasures
from retention.policy import Policy
from retention.rows.children import coupled_tables
from retention.rows.target import TargetTable
from retention.summary import RunStatus, RunSummary, status_of

DEAD_LETTER_LIMIT = 200  # rows one dead-letter page lists
STATEMENT_MS = PAGE_STATEMENT_MS  # a page view's statements (see PAGE_STATEMENT_MS)
ERASURES_SHOWN = 10  # a policy card lists its latest erasures (the CLI lists them all)


@dataclass(frozen=True)
class LastRun:
    """One run of a policy, as ``retention.runs`` recorded it."""

    run_id: str
    status: RunStatus | str  # planned (still running, or stopped before reconcile), clean, dirty…
    dry_run: bool
    cutoff: dt.datetime
    rows_deleted: int | None  # None until reconcile wrote the summary
    rows_remaining: int | None
    planned_at: dt.datetime
    finished_at: dt.datetime | None
    duration_seconds: float | None  # planned → reconciled
    windows: dict[str, int] = field(default_factory=dict)  # the plan's windows by state
    rows_deleted_so_far: int = 0  # by its windows, counted in each batch: progress while it runs
    lease_holder: str | None = None  # the run holding the policy's run lease (None: free)
    lease_taken_at: dt.datetime | None = None
    dag_id: str = ""  # the Airflow DAG that ran it (its run's page in the Airflow UI)
    logical_date: dt.datetime | None = None
    covered_note: str | None = None  # why it deleted nothing: another run had already deleted
    # rate-limit headers the limiter ignored during the run (the summary's note)
    rate_limit_headers_note: str | None = None
    # What bounded its drain (remote runs, once reconciled): the verdict and its sentence.
    bound_by: str | None = None
    bound_says: str | None = None


@dataclass(frozen=True)
class Minute:
    """One minute of the last 24 hours: deletions, 429 answers, and the queue's age then."""

    minute: dt.datetime
    deletions: int
    rate_limited: int
    queue_age_seconds: float | None = None  # the oldest waiting operation's age (None: none)


@dataclass(frozen=True)
class PolicyFigures:
    """Everything the overview shows about one policy (see docs/retention-view.md)."""

    policy: str
    remote: bool
    notify: bool
    last_run: LastRun | None  # the latest real run by logical date: the current state
    cutoff_now: dt.datetime  # now − retain_days: what a run started now would delete
    oldest_eligible: dt.datetime | None  # the oldest row older than cutoff_now
    # pending, in_flight, dead; dead_discarded: the dead ones reviewed and discarded
    operations: dict[str, int] = field(default_factory=dict)
    oldest_pending_seconds: float | None = None
    events: dict[str, int] = field(default_factory=dict)  # pending, in_flight, dead
    effective_rate: float | None = None  # calls/s the limiter allows now (0 while closed)
    rate_ceiling: float | None = None
    limiter_closed_until: dt.datetime | None = None
    minutes: list[Minute] = field(default_factory=list)
    # the real run that finished last, when it is not ``last_run`` (a backfill of an old
    # date, or ``last_run`` still running)
    last_finished: LastRun | None = None
    last_dry_run: LastRun | None = None  # the latest dry run: it deleted nothing
    day: list[Minute] = field(default_factory=list)  # the last 24 hours, for the charts
    day_error: str | None = None  # why the 24 hours could not be read (the rest could)
    # the policy's latest erasures, newest first, each with its state, deadline and ``late``
    erasures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def lag_seconds(self) -> float | None:
        """How long the oldest eligible row has waited past its cutoff (None: nothing waits)."""
        if self.oldest_eligible is None:
            return None
        return max(0.0, (self.cutoff_now - self.oldest_eligible).total_seconds())

    @property
    def deletions_last_hour(self) -> int:
        return sum(m.deletions for m in self.minutes)

    @property
    def rate_limited_last_hour(self) -> int:
        return sum(m.rate_limited for m in self.minutes)

    @property
    def deletions_per_minute(self) -> float:
        """The last hour's average (60 minutes, the current one included)."""
        return self.deletions_last_hour / max(1, len(self.minutes))

    @property
    def rate_limited_per_minute(self) -> float:
        return self.rate_limited_last_hour / max(1, len(self.minutes))


def policy_figures(conn: Connection, policy: Policy, now: dt.datetime) -> PolicyFigures:
    """Read one policy's figures from its database (the ``retention`` schema must exist).

    One read-only transaction; each statement may run ``STATEMENT_MS`` and wait
    for a lock the policy's ``lock_timeout_ms``, so a slow database fails this
    policy's card with the reason instead of hanging the page.
    """
    cutoff_now = now - dt.timedelta(days=policy.retain_days)
    params = {"policy": policy.name}
    scope = policy.remote.scope if policy.remote else None
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")
        set_local(
            conn,
            statement_ms=STATEMENT_MS,
            lock_ms=policy.lock_timeout_ms,
            timezone=policy.timestamp_timezone,  # a timestamp column without a time zone
        )
        runs = conn.execute(query("ui_runs"), params).fetchall()
        oldest = conn.execute(
            TargetTable.of(policy.table_spec, policy.remote).query("target_oldest_eligible"),
            {"cutoff": cutoff_now, "hold_policy": policy.name},  # a held row is no lag
        ).fetchone()
        queue = conn.execute(query("ui_queue"), {**params, "scope": scope}).fetchone()
        remote = {**params, "remote": policy.remote is not None}
        minutes = conn.execute(query("ui_per_minute"), remote).fetchall()
        day, day_error = _day(conn, remote)
        erasures = list_erasures(conn, policy=policy.name, limit=ERASURES_SHOWN)
    assert queue is not None
    oldest_value = oldest["oldest"] if oldest else None
    return PolicyFigures(
        policy=policy.name,
        remote=policy.remote is not None,
        notify=policy.notify is not None,
        last_run=_last_run(next((r for r in runs if r["is_latest"]), None)),
        last_finished=_last_run(
            next((r for r in runs if r["is_last_finished"] and not r["is_latest"]), None)
        ),
        last_dry_run=_last_run(next((r for r in runs if r["is_latest_dry"]), None)),
        cutoff_now=cutoff_now,
        oldest_eligible=None
        if oldest_value is None
        else as_aware(oldest_value, policy.timestamp_timezone),
        operations={k: int(v) for k, v in queue["operations_by_state"].items()},
        oldest_pending_seconds=_float(queue["oldest_pending_seconds"]),
        events={k: int(v) for k, v in queue["events_by_state"].items()},
        effective_rate=_float(queue["effective_rate"]),
        rate_ceiling=_float(queue["rate_ceiling"]),
        limiter_closed_until=queue["closed_until"],
        minutes=[Minute(m["minute"], int(m["deletions"]), int(m["rate_limited"])) for m in minutes],
        day=day,
        day_error=day_error,
        erasures=erasures,
    )


def _day(conn: Connection, params: dict[str, Any]) -> tuple[list[Minute], str | None]:
    """The last 24 hours per minute, in a savepoint: a ledger too large to read them
    within the statement timeout loses the charts, not the card's figures."""
    try:
        with conn.transaction():
            rows = conn.execute(query("ui_day_per_minute"), params).fetchall()
    except psycopg.errors.QueryCanceled as slow:
        return [], f"not read: {slow.diag.message_primary}"
    return [_minute(row) for row in rows], None


def _minute(row: dict[str, Any]) -> Minute:
    age = _float(row["queue_age_seconds"])
    return Minute(row["minute"], int(row["deletions"]), int(row["rate_limited"]), age)


def table_check(conn: Connection, policy: Policy) -> TableFit:
    """What the first task of a run would find wrong with the policy's table and its
    ``children:``: the same checks (:func:`retention.db.table_check.table_fit`, then
    :func:`retention.rows.children.coupled_tables`: a child table or its
    ``foreign_key`` that does not exist, a foreign key the policy does not account
    for), read-only and bounded like the figures."""
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")
        set_local(conn, statement_ms=STATEMENT_MS, lock_ms=policy.lock_timeout_ms)
        fit = table_fit(conn, policy)
        if not fit.exists:  # the card says so by itself (no table yet)
            return fit
        coupled = coupled_tables(conn, policy).problems
        return dataclasses.replace(fit, problems=[*fit.problems, *coupled]) if coupled else fit


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _last_run(row: dict[str, Any] | None) -> LastRun | None:
    if row is None:
        return None
    summary = RunSummary.from_stored(row["summary"])  # read typed, never by key
    return LastRun(
        run_id=row["run_id"],
        status=status_of(row["status"]),
        dry_run=bool(row["dry_run"]),
        cutoff=row["cutoff"],
        rows_deleted=row["rows_deleted"],
        rows_remaining=row["rows_remaining"],
        planned_at=row["planned_at"],
        finished_at=row["finished_at"],
        duration_seconds=_float(row["duration_seconds"]),
        windows={k: int(v) for k, v in sorted(row["windows_by_state"].items())},
        rows_deleted_so_far=int(row["rows_deleted_so_far"]),
        lease_holder=row["lease_holder"],
        lease_taken_at=row["lease_taken_at"],
        dag_id=row["dag_id"],
        logical_date=row["logical_date"],
        covered_note=summary.covered_note if summary else None,
        rate_limit_headers_note=summary.rate_limit_headers_note if summary else None,
        bound_by=summary.bound.verdict if summary and summary.bound else None,
        bound_says=summary.bound.says if summary and summary.bound else None,
    )


@dataclass(frozen=True)
class DeadLetterFilter:
    """The dead-letter page's filters; None means "any"."""

    policy: str | None = None
    failure_class: str | None = None
    since: dt.datetime | None = None
    discarded: bool = False  # list the dead operations reviewed and discarded instead


def dead_letters(
    conn: Connection,
    policies: list[str],
    chosen: DeadLetterFilter,
    limit: int = DEAD_LETTER_LIMIT,
) -> list[dict[str, Any]]:
    """Dead operations of ``policies`` (those the user may read) matching the filter: those
    awaiting review, or (``chosen.discarded``) those reviewed and discarded, with who
    discarded them, when and why."""
    return _filtered(conn, "ui_dead_letters", policies, chosen, limit)


def dead_letter_classes(conn: Connection, policies: list[str]) -> list[dict[str, Any]]:
    """(kind, policy, failure_class, n) of every dead operation and event of ``policies``;
    kind ``discarded`` counts the dead operations reviewed and discarded."""
    return conn.execute(query("ui_dead_letter_classes"), {"policies": policies}).fetchall()


def dead_keys_by_policy(
    conn: Connection, keys: list[str], policies: list[str]
) -> dict[str, list[str]]:
    """Which of ``keys`` are dead operations of ``policies``, grouped by policy."""
    rows = conn.execute(
        query("ui_dead_letter_policies"), {"keys": keys, "policies": policies}
    ).fetchall()
    return {row["policy"]: list(row["operation_keys"]) for row in rows}


def dead_events(
    conn: Connection,
    policies: list[str],
    chosen: DeadLetterFilter,
    limit: int = DEAD_LETTER_LIMIT,
) -> list[dict[str, Any]]:
    """Dead ``retention.deleted`` events of ``policies`` matching the filter."""
    return _filtered(conn, "ui_dead_events", policies, chosen, limit)


def _filtered(
    conn: Connection, name: str, policies: list[str], chosen: DeadLetterFilter, limit: int
) -> list[dict[str, Any]]:
    """One of the dead-letter lists (SQL ``name``), with the page's filters bound."""
    return conn.execute(
        query(name),
        {
            "policies": policies,
            "policy": chosen.policy,
            "failure_class": chosen.failure_class,
            "since": chosen.since,
            "discarded": chosen.discarded,
            "limit": limit,
        },
    ).fetchall()


def dead_event_ids_by_policy(
    conn: Connection, ids: list[str], policies: list[str]
) -> dict[str, list[str]]:
    """Which of ``ids`` are dead events of ``policies``, grouped by policy."""
    rows = conn.execute(
        query("ui_dead_event_policies"), {"ids": ids, "policies": policies}
    ).fetchall()
    return {row["policy"]: list(row["event_ids"]) for row in rows}
