"""The run summary as a typed record: what reconcile proves, and what everyone reads.

Reconcile builds a :class:`RunSummary`, stores :meth:`RunSummary.to_json` in
``retention.runs.summary`` and returns the same dict as the task's XCom; alerts,
metrics, the log report and ``raise_if_dirty`` read it back with
:meth:`RunSummary.of` and use named fields, so a renamed or missing figure is a
type error, not a silent ``None``.

The JSON keeps the shape it always had (external readers parse it): the keys,
their order and the optional blocks (``rows_deleted_by_table`` and ``orphans`` only
for a policy with ``children``, with ``orphans_not_counted`` when a count timed out,
``remote``, ``max_lag_hours`` and ``drain`` only for a policy with remote deletions,
with ``bound`` when its drain's time was measured, ``events`` only with ``notify``,
``covered_by`` only for a run that found its rows already deleted by another,
``rate_limit_headers_note`` only when the API's rate-limit headers were ignored).
A summary of a run that stopped before reconcile (``partial``; built here by
:meth:`RunSummary.stopped`, recorded by ``run_record_stopped.sql``) has only some
of the figures: :meth:`RunSummary.to_json` writes that shape for it. Every field
therefore has a default, and the partial-only keys are fields too.

Readers (the report, the CLI, the Retention view, alerts, metrics, the demo) read a
stored summary with :meth:`RunSummary.from_stored` and use attributes only: a key a
summary stored by an older release lacks takes its default, a key it does not know is
left out, and no consumer reads the JSON by key (``tests/unit/test_summary_readers.py``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Self


class RunStatus(StrEnum):
    """Every value ``retention.runs.status`` (and the summary's ``status``) takes.

    ``planned`` from the plan until reconcile (or a stop) records another; ``clean``,
    ``dirty``, ``backlog`` and ``dry_run`` once reconciled; ``cancelled`` when the run
    stopped before reconcile and none of its windows still runs. Decided by
    :func:`retention.runs.status.run_status` alone.
    """

    PLANNED = "planned"
    CLEAN = "clean"
    DIRTY = "dirty"
    BACKLOG = "backlog"
    DRY_RUN = "dry_run"
    CANCELLED = "cancelled"


# The figures reconcile always writes, in the order of the stored JSON. The optional
# blocks (remote, max_lag_hours, drain, events) are added by :meth:`RunSummary.to_json`
# when they apply.
_RECONCILED_KEYS = (
    "run_kind",
    "policy",
    "dag_id",
    "run_id",
    "plan_id",
    "table",
    "status",
    "dry_run",
    "cutoff",
    "anchor_source",
    "logical_date",
    "windows",
    "windows_unfinished",
    "windows_failed",
    "rows_planned",
    "rows_planned_is_estimate",
    "rows_deleted",
    "rows_deleted_by_windows",
    "rows_deleted_by_drain",
    "rows_counted",
    "rows_remaining",
    "rows_remaining_in_windows",
    "rows_outside_windows",
    "dirty_windows",
    "plan_seconds",
    "delete_seconds",
    "longest_batch_ms",
    "reconcile_seconds",
    "plan_notes",
    "partitions",
    "partitions_finished",
    "partitions_stranded",
    "partitions_detach_pending",
    "partition_problems",
    "pauses",
    "paused_seconds",
    "pause_reasons",
    "rows_held",
    "objects_held",
)


# The keys of a partial summary (a run that stopped before reconcile), in the order it
# has always been written in.
_PARTIAL_KEYS = (
    "policy",
    "dag_id",
    "run_id",
    "plan_id",
    "table",
    "status",
    "partial",
    "reason",
    "dry_run",
    "cutoff",
    "windows",
    "windows_by_state",
    "rows_planned",
    "rows_deleted",
    "rows_deleted_by_windows",
    "rows_deleted_by_drain",
    "rows_counted",
    "stopped_at",
)


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` that are fields of ``cls`` (a newer writer's extra keys are
    left out rather than failing an older reader)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _read(cls: Any, data: Mapping[str, Any] | None) -> Any:
    """One nested block read typed (None stays None): keys it does not know are left out,
    keys it lacks take their defaults."""
    return None if data is None else cls(**_known(cls, data))


def _without_nulls(item: Any) -> dict[str, Any]:
    """A record's JSON without its None fields (the shape of the partition lists)."""
    return {k: v for k, v in dataclasses.asdict(item).items() if v is not None}


@dataclass(frozen=True, kw_only=True)
class DirtyWindow:
    """A planned window that still holds rows older than the cutoff."""

    window_key: str = ""
    label: str = ""
    rows_remaining: int = 0


@dataclass(frozen=True, kw_only=True)
class DrainEvidence:
    """The drain passes of the run (remote policies): how many, what they deleted, their
    errors, and ``note`` (only when a pass failed) on what their figures count."""

    passes: int = 0
    rows_deleted: int = 0
    errors: list[str] = field(default_factory=list)
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "passes": self.passes,
            "rows_deleted": self.rows_deleted,
            "errors": self.errors,
        }
        if self.note is not None:
            data["note"] = self.note
        return data


@dataclass(frozen=True, kw_only=True)
class PartitionAttempt:
    """A partition the run's fast path detached, dropped or left to the row path
    (``partitions``; a missing figure is left out of the JSON)."""

    partition: str = ""
    bounds: str | None = None
    estimated_rows: int | str | None = None  # the number, or "unknown"
    action: str | None = None
    state: str | None = None
    reason: str | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class PartitionClosed:
    """An earlier run's attempt that this run's finishing pass closed
    (``partitions_finished``)."""

    partition: str = ""
    run_id: str | None = None
    action: str | None = None
    state: str | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class PartitionStranded:
    """A drop-action partition of the policy whose rows are outside the table
    (``partitions_stranded``)."""

    partition: str = ""
    run_id: str | None = None
    state: str | None = None
    reason: str | None = None
    error: str | None = None
    drop_attempts: int | None = None
    table_now: str | None = None


@dataclass(frozen=True, kw_only=True)
class OtherRun:
    """Another run of the policy whose windows worked while this one was under way."""

    run_id: str = ""
    windows: int = 0
    rows_deleted: int = 0
    first_started: str | None = None  # ISO 8601
    last_finished: str | None = None  # ISO 8601; None while it works


@dataclass(frozen=True, kw_only=True)
class RemoteEvidence:
    """How the operation ledger explains the rows that remain (remote policies)."""

    eligible_rows_by_state: dict[str, int] = field(default_factory=dict)
    unexplained_rows: int = 0  # no operation, or a done one whose row is still there
    oldest_overdue_hours: float | None = None
    attempts_by_outcome: dict[str, int] = field(default_factory=dict)
    rate_limited_responses: int = 0
    lease_expiries: int = 0
    dead_total: int = 0
    ledger_backlog: dict[str, Any] = field(default_factory=dict)
    effective_rate: Any = None


@dataclass(frozen=True, kw_only=True)
class BoundEvidence:
    """What bounded the drain (remote policies): the verdict of ``retention.queue.bound``
    on the time its passes measured, the shares it read, and what to tune, in ``says``.

    Shares are of the workers' time in passes: ``limiter_share`` without a token (or
    with the scope closed), ``waiting_for_work_share`` with nothing to call,
    ``database_share`` paused or paced, ``working_share`` the rest (calls, claims,
    records); ``pool_busy_share`` is the share of the sampled time the pool had no free
    slot (None: not read, and ``pool_unread`` says why). ``slots_needed`` is Little's
    law's number, given for a capacity-bound drain only.
    """

    verdict: str = "unknown"  # unbound, upstream, capacity, database, unknown
    says: str = ""
    limiter_share: float = 0.0
    waiting_for_work_share: float = 0.0
    pool_busy_share: float | None = None
    database_share: float = 0.0
    working_share: float = 0.0
    mean_call_ms: float | None = None
    effective_rate: float | None = None  # the limiter's, averaged over the passes' time
    rate_per_second: float | None = None
    pool: str | None = None
    pool_slots: int | None = None  # as sampled (None: not read)
    slots_needed: int | None = None
    pool_unread: str | None = None
    worker_seconds: float = 0.0
    calls: int = 0


@dataclass(frozen=True, kw_only=True)
class EventEvidence:
    """The policy's events after this run's delivery, and what makes them a problem."""

    delivered_this_run: int = 0
    pending_after_delivery: int = 0
    pending_why: str | None = None
    by_state: dict[str, int] = field(default_factory=dict)
    overdue: int = 0
    endpoint_disabled_at: str | None = None
    delivery: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class CoveredBy:
    """The run that had already deleted everything this run's cutoff allows, before this
    run was planned (a backfill's older date run after a later one): ``note`` says so in
    words, the same wherever the summary is shown."""

    run_id: str = ""
    logical_date: str | None = None  # ISO 8601
    cutoff: str = ""
    finished_at: str = ""
    note: str = ""

    @classmethod
    def of_run(
        cls,
        *,
        cutoff: dt.datetime,
        run_id: str,
        logical_date: dt.datetime | None,
        its_cutoff: dt.datetime,
        finished_at: dt.datetime,
    ) -> CoveredBy:
        """The record for a run with ``cutoff`` covered by run ``run_id``."""
        return cls(
            run_id=run_id,
            logical_date=logical_date.isoformat() if logical_date else None,
            cutoff=its_cutoff.isoformat(),
            finished_at=finished_at.isoformat(),
            note=covered_note(cutoff, run_id, logical_date),
        )


def covered_note(cutoff: dt.datetime, run_id: str, logical_date: dt.datetime | None) -> str:
    """``nothing older than 2026-10-26 was left: run 2026-11-27 deleted it``: the covering
    run is named by its logical date when it has one, else by its run id."""
    run = day(logical_date) if logical_date else run_id
    return f"nothing older than {day(cutoff)} was left: run {run} deleted it"


RATE_LIMIT_HEADERS_IGNORED = "malformed or contradictory rate-limit headers ignored"


def rate_limit_headers_note(problem: str | None) -> str | None:
    """The summary's one line for headers the limiter ignored (None: none were)."""
    return None if problem is None else f"{RATE_LIMIT_HEADERS_IGNORED}: {problem}"


def day(value: dt.datetime) -> str:
    """A moment as people write it: the UTC date, with the time only when it is not midnight."""
    utc = value.astimezone(dt.UTC)
    return f"{utc:%Y-%m-%d}" if utc.time() == dt.time() else f"{utc:%Y-%m-%d %H:%M}Z"


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """One run's evidence, as stored in ``retention.runs.summary``.

    Every number is true when reconcile writes it and says what it counts:
    ``rows_deleted`` is this run's own work (windows plus drain),
    ``rows_remaining`` counts the whole table older than the cutoff,
    ``rows_planned`` is the statistics' estimate (``rows_planned_is_estimate``).
    """

    run_kind: str | None = None
    policy: str | None = None
    dag_id: str | None = None
    run_id: str | None = None
    plan_id: str | None = None
    table: str | None = None
    # 'cancelled' or 'planned' in a partial summary. A status this release does not know
    # (a newer release's) stays the plain string stored: see :meth:`of`.
    status: RunStatus | str | None = None
    dry_run: bool = False
    cutoff: str | None = None  # ISO 8601
    anchor_source: str | None = None
    logical_date: str | None = None
    windows: int | None = None
    windows_unfinished: list[str] = field(default_factory=list)
    windows_failed: list[str] = field(default_factory=list)
    rows_planned: int | None = None
    rows_planned_is_estimate: bool = True
    rows_deleted: int | None = None
    rows_deleted_by_windows: int | None = None
    rows_deleted_by_drain: int | None = None
    rows_counted: int | None = None  # a dry run's count; None when rows were deleted
    rows_remaining: int | None = None
    rows_remaining_in_windows: int | None = None
    rows_outside_windows: int | None = None
    # Rows older than the cutoff that a legal hold keeps: not in rows_remaining, not dirt.
    rows_held: int = 0
    # Operations waiting in 'held' (remote policies; None otherwise).
    objects_held: int | None = None
    dirty_windows: list[DirtyWindow] = field(default_factory=list)
    plan_seconds: float | None = None
    delete_seconds: float | None = None
    longest_batch_ms: float | None = None
    reconcile_seconds: float | None = None
    plan_notes: list[Any] = field(default_factory=list)
    partitions: list[PartitionAttempt] = field(default_factory=list)
    partitions_finished: list[PartitionClosed] = field(default_factory=list)
    partitions_stranded: list[PartitionStranded] = field(default_factory=list)
    partitions_detach_pending: list[str] = field(default_factory=list)
    partition_problems: list[str] = field(default_factory=list)
    pauses: int = 0
    paused_seconds: float = 0.0
    pause_reasons: dict[str, float] = field(default_factory=dict)
    # Only for a policy with children: rows deleted by table (the policy's table and each
    # listed child, by the windows), orphans of a listed child without a foreign key
    # constraint (table → child rows whose parent key no longer exists), and the foreign
    # keys left to an unlisted ON DELETE CASCADE (also in plan_notes).
    rows_deleted_by_table: dict[str, int] | None = None
    orphans: dict[str, int] | None = None
    # listed children whose orphan count timed out (None: every count finished)
    orphans_not_counted: list[str] | None = None
    # Only for a policy with remote deletions:
    remote: RemoteEvidence | None = None
    max_lag_hours: float | None = None
    drain: DrainEvidence | None = None
    bound: BoundEvidence | None = None  # what bounded the drain (none for a dry run)
    other_runs: list[OtherRun] = field(default_factory=list)
    # Only for a policy with notify:
    events: EventEvidence | None = None
    # Only for a clean run that deleted nothing because another run had already:
    covered_by: CoveredBy | None = None
    # Only for a remote policy whose API sent malformed or contradictory rate-limit
    # headers while the run worked (the limiter kept its own rate): said once, in words.
    rate_limit_headers_note: str | None = None
    # Only in a partial summary (:meth:`stopped`), never written by reconcile:
    partial: bool = False
    reason: str | None = None
    windows_by_state: dict[str, int] | None = None
    stopped_at: str | None = None

    @property
    def covered_note(self) -> str | None:
        """Why the run deleted nothing, in words: another run had already (None: it did not)."""
        return (self.covered_by.note or None) if self.covered_by is not None else None

    @property
    def event_problems(self) -> list[str]:
        """The event delivery's problems (none for a policy without notify)."""
        return self.events.problems if self.events is not None else []

    @classmethod
    def of(cls, data: RunSummary | Mapping[str, Any]) -> Self:
        """Read a stored summary (or an XCom) back typed; a RunSummary passes through.

        Written by any release: a key the summary lacks takes its default, a key this
        release does not know is left out (nested blocks alike), and a status it does not
        know stays the plain string stored (it equals no :class:`RunStatus` member, is
        shown as stored, and :meth:`to_json` writes it back unchanged)."""
        if isinstance(data, RunSummary):
            return data  # type: ignore[return-value]
        values = _known(cls, data)
        if values.get("status") is not None:
            values["status"] = status_of(values["status"])
        values["dirty_windows"] = [_read(DirtyWindow, w) for w in values.get("dirty_windows") or []]
        values["partitions"] = [_read(PartitionAttempt, p) for p in values.get("partitions") or []]
        values["partitions_finished"] = [
            _read(PartitionClosed, p) for p in values.get("partitions_finished") or []
        ]
        values["partitions_stranded"] = [
            _read(PartitionStranded, p) for p in values.get("partitions_stranded") or []
        ]
        values["other_runs"] = [_read(OtherRun, r) for r in values.get("other_runs") or []]
        for name, block in (
            ("remote", RemoteEvidence),
            ("drain", DrainEvidence),
            ("bound", BoundEvidence),
            ("events", EventEvidence),
            ("covered_by", CoveredBy),
        ):
            if name in values:
                values[name] = _read(block, values[name])
        return cls(**values)

    @classmethod
    def from_stored(cls, stored: RunSummary | Mapping[str, Any] | str | None) -> Self | None:
        """A ``retention.runs.summary`` value read typed: the column as psycopg returns it
        (a dict), its JSON text, or NULL (None: no summary recorded yet)."""
        if stored is None:
            return None
        if isinstance(stored, str):
            stored = json.loads(stored)
        return cls.of(stored)  # type: ignore[arg-type]

    @classmethod
    def stopped(
        cls,
        *,
        policy: str,
        dag_id: str | None,
        run_id: str,
        plan_id: str | None,
        table: str | None,
        status: RunStatus,
        reason: str,
        dry_run: bool,
        cutoff: str,
        windows_by_state: Mapping[str, int],
        rows_planned: int | None,
        rows_deleted_by_windows: int,
        rows_deleted_by_drain: int,
        rows_counted: int | None,
        stopped_at: str,
    ) -> Self:
        """The partial summary of a run that stopped before its reconcile: what its
        windows (and drain passes) did so far, and the status :func:`run_status` gave it.

        ``cutoff`` and ``stopped_at`` are the text Postgres writes for a timestamptz in
        JSON (``to_jsonb``: ``2026-01-01T00:00:00.12+00:00``, no trailing zeros in the
        fraction, unlike ``isoformat()``), as ``run_stopped_facts.sql`` returns them: the
        partial summary has always stored them so."""
        return cls(
            partial=True,
            policy=policy,
            dag_id=dag_id,
            run_id=run_id,
            plan_id=plan_id,
            table=table,
            status=status,
            reason=reason,
            dry_run=dry_run,
            cutoff=cutoff,
            windows=sum(windows_by_state.values()),
            windows_by_state=dict(windows_by_state),
            rows_planned=rows_planned,
            rows_deleted=rows_deleted_by_windows + rows_deleted_by_drain,
            rows_deleted_by_windows=rows_deleted_by_windows,
            rows_deleted_by_drain=rows_deleted_by_drain,
            rows_counted=rows_counted if dry_run else None,
            stopped_at=stopped_at,
        )

    def to_json(self) -> dict[str, Any]:
        """The dict stored in ``retention.runs.summary`` and returned as the XCom: the shape
        reconcile writes, or a partial summary's shape for a run that stopped before it."""
        if self.partial:
            return {key: _plain(getattr(self, key)) for key in _PARTIAL_KEYS}
        data: dict[str, Any] = {}
        for key in _RECONCILED_KEYS:
            value = getattr(self, key)
            if key == "dirty_windows":
                value = [dataclasses.asdict(w) for w in value]
            elif key in ("partitions", "partitions_finished", "partitions_stranded"):
                value = [_without_nulls(p) for p in value]
            data[key] = _plain(value)
        if self.rows_deleted_by_table is not None:
            data["rows_deleted_by_table"] = self.rows_deleted_by_table
            data["orphans"] = self.orphans or {}
            if self.orphans_not_counted:
                data["orphans_not_counted"] = self.orphans_not_counted
        if self.remote is not None:
            data["remote"] = dataclasses.asdict(self.remote)
            data["max_lag_hours"] = self.max_lag_hours
            data["drain"] = None if self.drain is None else self.drain.to_json()
            if self.bound is not None:
                data["bound"] = dataclasses.asdict(self.bound)
        data["other_runs"] = [dataclasses.asdict(r) for r in self.other_runs]
        if self.events is not None:
            data["events"] = dataclasses.asdict(self.events)
        if self.covered_by is not None:
            data["covered_by"] = dataclasses.asdict(self.covered_by)
        if self.rate_limit_headers_note is not None:
            data["rate_limit_headers_note"] = self.rate_limit_headers_note
        return data


def status_of(value: str) -> RunStatus | str:
    """A stored status read typed; one this release does not know (a newer release's)
    stays the plain string, so a view page or a report listing it still reads."""
    try:
        return RunStatus(value)
    except ValueError:
        return str(value)


def _plain(value: Any) -> Any:
    """A status as the plain string it is stored as (the XCom and JSON hold no enum)."""
    return value.value if isinstance(value, RunStatus) else value
