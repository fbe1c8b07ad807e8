"""Reconcile a run: prove the table is clean to the cutoff, or say exactly what is not.

Counts what is still older than the cutoff in every planned window and in the
whole table (which also catches rows that arrived with old timestamps after
planning), writes the summary to ``retention.runs`` and returns it.  A run
whose rows are not all gone is reported as ``dirty`` and the task fails: a
green run must mean the work was done.  Old rows can also sit outside the
table: a partition the fast path detached to drop and could not (or gave up,
while that table exists), and a partition whose ``DETACH … CONCURRENTLY`` is
pending; each keeps every run dirty until it is gone (:func:`partition_evidence`).
A remote policy's summary also says what bounded its drain (:func:`drain_bound`).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from retention.db.connection import Connection, bounded
from retention.db.oldest import as_aware
from retention.db.sqlfiles import query
from retention.policy.model import Policy, TableSpec
from retention.queue.bound import DrainSetting, PassTime, judge
from retention.rows.children import count_orphans
from retention.rows.lifecycle import count_window
from retention.rows.partitions import rows_figure
from retention.rows.planner import load_plan
from retention.rows.target import TargetTable
from retention.rows.windows import Window
from retention.runs.lease import holds_run_lease
from retention.runs.status import RemoteFacts, RunFacts, RunStatus, run_status
from retention.summary import (
    BoundEvidence,
    CoveredBy,
    DirtyWindow,
    DrainEvidence,
    EventEvidence,
    OtherRun,
    PartitionAttempt,
    PartitionClosed,
    PartitionStranded,
    RemoteEvidence,
    RunSummary,
    rate_limit_headers_note,
)

MAX_LISTED_WINDOWS = 10


class RetentionIncomplete(RuntimeError):
    """Rows older than the cutoff remain after a (non dry-run) run."""


class RunNotPlanned(RuntimeError):
    """The run never planned (it waited for the run lease in vain, or planning failed):
    there is nothing to reconcile, and retrying cannot change that."""


def reconcile_run(conn: Connection, policy: Policy, run_id: str) -> dict[str, Any]:
    """Count what remains, record the run summary and return it as JSON (the XCom's
    shape; does not raise on dirt). :func:`reconcile` returns it typed."""
    return reconcile(conn, policy, run_id).to_json()


def reconcile(conn: Connection, policy: Policy, run_id: str) -> RunSummary:
    """Gather the run's facts, decide its status (:func:`run_status`), record the summary."""
    started = time.perf_counter()
    plan_id, windows, run = _planned_run(conn, policy, run_id)
    gathered = _gather(conn, policy, run_id, plan_id, windows, run)
    status = run_status(gathered.facts(policy))
    summary = gathered.summary(policy, run_id, status, time.perf_counter() - started)
    _record(conn, summary)
    return summary


def _planned_run(
    conn: Connection, policy: Policy, run_id: str
) -> tuple[str, list[Window], dict[str, Any]]:
    """The run's plan and its ``retention.runs`` row, or :class:`RunNotPlanned`."""
    plan = load_plan(conn, policy.name, run_id)
    run = conn.execute(query("run_for_id"), {"policy": policy.name, "run_id": run_id}).fetchone()
    if plan is None or run is None:
        holder = holds_run_lease(conn, policy.name, run_id)
        waited = (
            f" Run {holder} holds the policy's run lease: this run never took it (see "
            "take_run_lease's log); clear this run once that one has finished."
            if holder
            else " See the logs of take_run_lease and plan_windows."
        )
        raise RunNotPlanned(
            f"policy {policy.name!r}: run {run_id!r} has no recorded plan; plan_windows did "
            "not finish, so there is nothing to reconcile and no window ran (partitions "
            "that drop_partitions detached first, if any, are in retention.partition_drops)."
            + waited
        )
    plan_id, windows = plan
    return plan_id, windows, run


@dataclass(frozen=True, kw_only=True)
class _Gathered:
    """What reconcile counted and read, before the status is decided."""

    plan_id: str
    windows: list[Window]
    run: dict[str, Any]
    dirty_windows: list[dict[str, Any]]
    rows_remaining: int
    rows_held: int
    objects_held: int | None
    ledger: dict[str, dict[str, Any]]
    drain_passes: list[dict[str, Any]]
    remote: dict[str, Any] | None
    partitions: PartitionEvidence
    events: dict[str, Any] | None
    other_runs: list[OtherRun]
    orphans: dict[str, int] | None  # None: the policy lists no children
    covering_run: dict[str, Any] | None  # a clean run that deleted this cutoff's rows first
    orphans_not_counted: list[str]  # listed children whose orphan count timed out
    rate_header_problem: str | None  # rate-limit headers a worker ignored during the run

    @property
    def dry_run(self) -> bool:
        return bool(self.run["dry_run"])

    @property
    def unfinished(self) -> list[str]:
        return sorted(k for k, r in self.ledger.items() if r["state"] not in ("done", "counted"))

    def facts(self, policy: Policy) -> RunFacts:
        """The facts :func:`run_status` decides from."""
        remote = self.remote
        return RunFacts(
            dry_run=self.dry_run,
            rows_remaining=self.rows_remaining,
            rows_held=self.rows_held,
            windows_unfinished=len(self.unfinished),
            partition_problems=len(self.partitions.partition_problems),
            event_problems=len(self.events["problems"]) if self.events else 0,
            orphans=sum((self.orphans or {}).values()),
            remote=None
            if remote is None
            else RemoteFacts(
                unexplained_rows=remote["unexplained_rows"],
                oldest_overdue_hours=remote["oldest_overdue_hours"],
                max_lag_hours=policy.max_lag_hours,
            ),
        )

    def summary(self, policy: Policy, run_id: str, status: RunStatus, seconds: float) -> RunSummary:
        """The run's summary: every figure as counted, and the status decided."""
        run, ledger, dry_run = self.run, self.ledger, self.dry_run
        deleted_by_windows = sum(int(r["rows_deleted"]) for r in ledger.values())
        deleted_by_drain = sum(int(p.get("rows_deleted", 0)) for p in self.drain_passes)
        counted = [r["rows_counted"] for r in ledger.values() if r["rows_counted"] is not None]
        in_windows = sum(w["rows_remaining"] for w in self.dirty_windows)
        return RunSummary(
            run_kind="dry run: nothing deleted, nothing called" if dry_run else "deletion",
            policy=policy.name,
            dag_id=policy.dag_id,
            run_id=run_id,
            plan_id=self.plan_id,
            table=policy.table,
            status=status,
            dry_run=dry_run,
            cutoff=run["cutoff"].isoformat(),
            anchor_source=run["anchor_source"],
            logical_date=run["logical_date"].isoformat() if run["logical_date"] else None,
            windows=len(self.windows),
            windows_unfinished=self.unfinished[:MAX_LISTED_WINDOWS],
            windows_failed=sorted(
                k for k, r in ledger.items() if r["state"] in ("failed", "running")
            )[:MAX_LISTED_WINDOWS],
            rows_planned=int(run["rows_planned"]),
            rows_planned_is_estimate=True,  # the statistics' estimate, not a count
            rows_deleted=deleted_by_windows + deleted_by_drain,
            rows_deleted_by_windows=deleted_by_windows,
            rows_deleted_by_drain=deleted_by_drain,
            rows_counted=sum(counted) if dry_run else None,
            rows_remaining=self.rows_remaining,
            rows_remaining_in_windows=in_windows,
            rows_outside_windows=self.rows_remaining - in_windows,
            rows_held=self.rows_held,
            objects_held=self.objects_held,
            # A dry run deletes nothing, so every window still has its rows: not dirt.
            dirty_windows=[]
            if dry_run
            else [DirtyWindow(**w) for w in self.dirty_windows[:MAX_LISTED_WINDOWS]],
            plan_seconds=_round(run["plan_seconds"]),
            delete_seconds=_round(sum(float(r["seconds"]) for r in ledger.values())),
            longest_batch_ms=_round(
                max((r["longest_batch_ms"] or 0.0 for r in ledger.values()), default=0.0)
            ),
            reconcile_seconds=_round(seconds),
            plan_notes=run["plan_notes"] or [],
            partitions=self.partitions.partitions,
            partitions_finished=self.partitions.partitions_finished,
            partitions_stranded=self.partitions.partitions_stranded,
            partitions_detach_pending=self.partitions.partitions_detach_pending,
            partition_problems=self.partitions.partition_problems,
            **pause_totals(ledger.values()),
            remote=None if self.remote is None else RemoteEvidence(**self.remote),
            max_lag_hours=policy.max_lag_hours if self.remote is not None else None,
            drain=None if self.remote is None else drain_summary(self.drain_passes),
            bound=None
            if self.remote is None or dry_run
            else drain_bound(policy, ledger.values(), self.drain_passes),
            other_runs=self.other_runs,
            events=None if self.events is None else EventEvidence(**self.events),
            rows_deleted_by_table=None
            if self.orphans is None
            else rows_by_table(policy, ledger.values(), self.drain_passes),
            orphans=self.orphans,
            orphans_not_counted=self.orphans_not_counted or None,
            covered_by=self.covered_by(status, deleted_by_windows + deleted_by_drain),
            rate_limit_headers_note=rate_limit_headers_note(self.rate_header_problem),
        )

    def covered_by(self, status: RunStatus, rows_deleted: int) -> CoveredBy | None:
        """The run that had left this one nothing to delete: only for a clean run that
        deleted nothing, so "nothing was left" is what this run found."""
        covering = self.covering_run
        if covering is None or self.dry_run or rows_deleted or status != RunStatus.CLEAN:
            return None
        return CoveredBy.of_run(
            cutoff=self.run["cutoff"],
            run_id=covering["run_id"],
            logical_date=covering["logical_date"],
            its_cutoff=covering["cutoff"],
            finished_at=covering["finished_at"],
        )


def _gather(
    conn: Connection,
    policy: Policy,
    run_id: str,
    plan_id: str,
    windows: list[Window],
    run: dict[str, Any],
) -> _Gathered:
    """Count what remains (per window and in the whole table) and read the ledgers."""
    cutoff: dt.datetime = run["cutoff"]
    not_counted: list[str] = []
    dirty_windows = count_windows(conn, policy, windows)
    target = TargetTable.of(policy.table_spec, policy.remote)  # object holds count too
    with bounded(conn, policy.timeouts, reads=True, timezone=policy.timestamp_timezone):
        total_row = conn.execute(
            target.query("target_count_eligible"), {"cutoff": cutoff, "hold_policy": policy.name}
        ).fetchone()
        objects_held = (
            conn.execute(query("ops_held_count"), {"policy": policy.name}).fetchone()
            if policy.remote is not None
            else None
        )
    ledger = {
        row["window_key"]: row
        for row in conn.execute(
            query("window_for_plan"), {"policy": policy.name, "plan_id": plan_id}
        )
    }
    return _Gathered(
        plan_id=plan_id,
        windows=windows,
        run=run,
        dirty_windows=dirty_windows,
        rows_remaining=int(total_row["n"]) if total_row else 0,
        rows_held=int(total_row["held"]) if total_row else 0,
        objects_held=int(objects_held["n"]) if objects_held else None,
        ledger=ledger,
        drain_passes=run["drain"] or [],
        remote=explain_remote(conn, policy, cutoff, run["planned_at"]) if policy.remote else None,
        partitions=partition_evidence(conn, policy.name, run_id, policy.table_spec),
        events=explain_events(conn, policy, run["events_delivery"])
        if policy.notify is not None
        else None,
        other_runs=other_runs(conn, policy.name, run_id, run["planned_at"]),
        orphans=count_orphans_bounded(conn, policy, not_counted) if policy.children else None,
        orphans_not_counted=not_counted,
        rate_header_problem=rate_header_problem(conn, policy, run["planned_at"]),
        covering_run=conn.execute(
            query("run_covering"),
            {
                "policy": policy.name,
                "run_id": run_id,
                "cutoff": cutoff,
                "planned_at": run["planned_at"],
            },
        ).fetchone(),
    )


def rate_header_problem(conn: Connection, policy: Policy, since: dt.datetime) -> str | None:
    """The malformed or contradictory rate-limit headers the policy's limiter scope
    ignored since the run began (the last ones, if several), or None."""
    if policy.remote is None:
        return None
    row = conn.execute(
        query("limiter_header_problem_since"), {"scope": policy.remote.scope, "since": since}
    ).fetchone()
    return row["header_problem"] if row else None


def count_orphans_bounded(
    conn: Connection, policy: Policy, not_counted: list[str]
) -> dict[str, int]:
    """Orphans of the listed children without a foreign key constraint, read bounded: a
    count that times out on a large child table is named in ``not_counted`` (shown in
    the summary; not dirt by itself) rather than failing reconcile."""
    with bounded(conn, policy.timeouts, reads=True, timezone=policy.timestamp_timezone):
        return count_orphans(conn, policy, not_counted)


def rows_by_table(
    policy: Policy,
    windows: Iterable[dict[str, Any]],
    drain_passes: Iterable[dict[str, Any]] = (),
) -> dict[str, int]:
    """Rows the windows and the drain passes deleted in each table: the policy's, then
    each listed child's (so its figure for the policy's table is ``rows_deleted``)."""
    totals = {policy.table: 0, **{child.table: 0 for _, child in policy.child_tables()}}
    for window in windows:
        counted = window.get("rows_deleted_by_table") or {}
        if not counted:  # deleted before the windows counted by table: its rows are the table's
            totals[policy.table] += int(window["rows_deleted"])
        for table, rows in counted.items():
            totals[table] = totals.get(table, 0) + int(rows)
    for drained in drain_passes:
        counted = drained.get("rows_by_table") or {}
        if not counted:  # a pass from before passes counted by table: the table's rows
            totals[policy.table] += int(drained.get("rows_deleted", 0))
        for table, rows in counted.items():
            totals[table] = totals.get(table, 0) + int(rows)
    return totals


def _record(conn: Connection, summary: RunSummary) -> None:
    """Write the summary and its columns to the run's ``retention.runs`` row."""
    conn.execute(
        query("run_record_summary"),
        {
            "policy": summary.policy,
            "run_id": summary.run_id,
            "status": summary.status and str(summary.status),
            "windows": summary.windows,
            "rows_deleted": summary.rows_deleted,
            "rows_counted": summary.rows_counted,
            "rows_remaining": summary.rows_remaining,
            "rows_outside_windows": summary.rows_outside_windows,
            "delete_seconds": summary.delete_seconds,
            "reconcile_seconds": summary.reconcile_seconds,
            "longest_batch_ms": summary.longest_batch_ms,
            "summary": json.dumps(summary.to_json()),
        },
    )


def drain_bound(
    policy: Policy, windows: Iterable[Mapping[str, Any]], drain_passes: Iterable[Mapping[str, Any]]
) -> BoundEvidence:
    """What bounded the run's drain: the verdict on the time its windows' passes and its
    drain passes measured, summed (each share weighted by the time of its pass)."""
    total = PassTime()
    for window in windows:
        total += PassTime.of(window.get("drain_time"))
    for drained in drain_passes:
        total += PassTime.of(drained.get("time"))
    return judge(total, DrainSetting.of(policy))


def drain_summary(passes: list[dict[str, Any]]) -> DrainEvidence:
    """The drain's passes of this run, what they deleted and their errors."""
    errors = [p["error"] for p in passes if p.get("error")]
    return DrainEvidence(
        passes=len(passes),
        rows_deleted=sum(int(p.get("rows_deleted", 0)) for p in passes),
        errors=errors,
        note="a pass failed; what it deleted before is counted when its worker "
        "recorded it (an error in a claim or a pause check records none)"
        if errors
        else None,
    )


def count_windows(conn: Connection, policy: Policy, windows: list[Window]) -> list[dict[str, Any]]:
    """Count and record what is still older than the cutoff in each window; return the
    windows that kept rows."""
    remaining: list[dict[str, Any]] = []
    for window in windows:
        left = count_window(conn, policy.table_spec, policy.timeouts, window)
        conn.execute(
            query("window_remaining"), {"window_key": window.window_key, "rows_remaining": left}
        )
        if left:
            remaining.append(
                {"window_key": window.window_key, "label": window.label, "rows_remaining": left}
            )
    return remaining


@dataclass(frozen=True, kw_only=True)
class PartitionEvidence:
    """The summary's partition figures (see :func:`partition_evidence`)."""

    partitions: list[PartitionAttempt]
    partitions_finished: list[PartitionClosed]
    partitions_stranded: list[PartitionStranded]
    partitions_detach_pending: list[str]
    partition_problems: list[str]


def partition_evidence(
    conn: Connection, policy: str, run_id: str, table: TableSpec
) -> PartitionEvidence:
    """What the partition fast path did in this run, what this run's finishing pass closed
    of earlier attempts, and the policy's partitions whose rows are outside the table.

    ``partition_problems`` says, one line per table, why the partitions make the run
    dirty: a drop-action partition that is neither dropped nor deliberately kept
    (``detach_only``) while this run ends; a drop given up (abandoned) in this run,
    or in any run while the table it detached still exists and is not a partition
    (its rows are outside the table counted); and a partition of the table whose
    ``DETACH … CONCURRENTLY`` is pending, whoever began it (the catalog, not the
    evidence: its rows are no longer seen through the table).
    """
    keys = {"policy": policy, "run_id": run_id}
    mine = _drops_of_run(conn, keys)
    finished = _drops_resolved_by_run(conn, keys)
    stranded = _drops_stranded(conn, policy)
    pending = _detaches_pending(conn, table)
    return PartitionEvidence(
        partitions=mine,
        partitions_finished=finished,
        partitions_stranded=stranded,
        partitions_detach_pending=pending,
        partition_problems=_partition_problems(
            run_id, f"{table.schema}.{table.name}", mine, finished, stranded, pending
        ),
    )


def _drops_of_run(conn: Connection, keys: dict[str, str]) -> list[PartitionAttempt]:
    """The partitions this run detached, dropped or left to the row path
    (``partition_drop_for_run.sql``), each with its state and why: the run's own account
    of what it did besides deleting rows."""
    return [
        PartitionAttempt(
            partition=r["partition_name"],
            bounds=r["bounds"],
            estimated_rows=rows_figure(r["estimated_rows"]),
            action=r["action"],
            state=r["state"],
            reason=r["reason"],
            error=r["last_error"],
        )
        for r in conn.execute(query("partition_drop_for_run"), keys)
    ]


def _drops_resolved_by_run(conn: Connection, keys: dict[str, str]) -> list[PartitionClosed]:
    """Records of earlier attempts that this run's finishing pass closed (dropped, marked
    detached, not_detached or abandoned: ``partition_drop_resolved.sql``): their runs'
    summaries are already written, so this run's is where the close is seen."""
    return [
        PartitionClosed(
            partition=r["partition_name"],
            run_id=r["run_id"],
            action=r["action"],
            state=r["state"],
            reason=r["reason"],
        )
        for r in conn.execute(query("partition_drop_resolved"), keys)
    ]


def _drops_stranded(conn: Connection, policy: str) -> list[PartitionStranded]:
    """The policy's drop-action partitions, of any run, whose rows are outside the table
    (``partition_drop_stranded.sql``): detached with the drop failed or never run, a detach
    still started, or abandoned while the detached table still exists. Each keeps every run
    dirty until it is gone, so every run names it, whichever run left it."""
    return [
        PartitionStranded(
            partition=r["partition_name"],
            run_id=r["run_id"],
            state=r["state"],
            reason=r["reason"],
            error=r["last_error"],
            drop_attempts=int(r["drop_attempts"]),
            table_now=r["table_now"],
        )
        for r in conn.execute(query("partition_drop_stranded"), {"policy": policy})
    ]


def _detaches_pending(conn: Connection, table: TableSpec) -> list[str]:
    """The table's partitions whose ``DETACH … CONCURRENTLY`` is pending, read from the
    catalog (``partition_detach_pending.sql``), not the evidence: whoever began it, their
    rows are no longer seen through the table, so no count of the table would find them."""
    return [
        r["partition_name"]
        for r in conn.execute(
            query("partition_detach_pending"), {"schema": table.schema, "table": table.name}
        )
    ]


def _partition_problems(
    run_id: str,
    table: str,
    mine: list[PartitionAttempt],
    finished: list[PartitionClosed],
    stranded: list[PartitionStranded],
    pending: list[str],
) -> list[str]:
    """One line per partition that makes the run dirty: each stranded one, each drop
    abandoned in this run or closed by it that the stranded lines did not already name
    (one partition, one line), and each pending detach."""
    problems = [_stranded_problem(p, run_id, table) for p in stranded]
    told = {(p.run_id, p.partition) for p in stranded}
    abandoned = [(run_id, m.partition, m.state, m.reason) for m in mine] + [
        (f.run_id, f.partition, f.state, f.reason) for f in finished
    ]
    problems += [
        f"{partition}: its drop was abandoned: {reason or 'no reason recorded'}"
        for its_run, partition, state, reason in abandoned
        if state == "abandoned" and (its_run, partition) not in told
    ]
    problems += [
        f"{name}: a DETACH … CONCURRENTLY of it is pending: its rows are outside "
        f"{table} until it is finished (FINALIZE) or cancelled"
        for name in pending
    ]
    return problems


def _stranded_problem(p: PartitionStranded, run_id: str, table: str) -> str:
    """One line for a drop-action partition whose rows are outside the table."""
    run = f" (run {p.run_id})" if p.run_id != run_id else ""
    if p.state == "abandoned":
        return (
            f"{p.partition}: its drop was abandoned: {p.reason or 'no reason recorded'}"
            f"{run}; the table detached, {p.table_now} still exists, outside {table}: "
            "drop it by hand if it is only old rows, or attach it again"
        )
    return f"{p.partition} is {p.state}, not dropped" + run + (f": {p.error}" if p.error else "")


def other_runs(conn: Connection, policy: str, run_id: str, since: dt.datetime) -> list[OtherRun]:
    """What other runs of the policy deleted while this one was under way.

    This run's ``rows_deleted`` counts only its own work; when another run's
    windows worked at the same time (a cleared task of an old run, a lease
    taken over), the summary shows them next to it instead of letting a small
    count next to "clean" look like a mystery.
    """
    return [
        OtherRun(
            run_id=row["run_id"],
            windows=int(row["windows"]),
            rows_deleted=int(row["rows_deleted"] or 0),
            first_started=row["first_started"].isoformat(),
            last_finished=row["last_finished"].isoformat() if row["last_finished"] else None,
        )
        for row in conn.execute(
            query("run_overlapping"), {"policy": policy, "run_id": run_id, "since": since}
        )
    ]


def pause_totals(windows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The run's pauses (health and the pause switch), summed over its windows."""
    reasons: dict[str, float] = {}
    pauses, seconds = 0, 0.0
    for window in windows:
        pauses += int(window["pauses"])
        seconds += float(window["paused_seconds"])
        for kind, waited in (window["pause_reasons"] or {}).items():
            reasons[kind] = reasons.get(kind, 0.0) + float(waited)
    return {
        "pauses": pauses,
        "paused_seconds": round(seconds, 3),
        "pause_reasons": {k: round(v, 3) for k, v in sorted(reasons.items())},
    }


def raise_if_dirty(summary: RunSummary | Mapping[str, Any]) -> None:
    """Fail loudly, naming the windows and counts, when rows remain unexplained."""
    s = RunSummary.of(summary)
    if s.status != RunStatus.DIRTY:
        return
    parts = [
        _dirty_headline(s),
        *_window_reasons(s),
        *([f"Event delivery: {'; '.join(s.event_problems)}."] if s.event_problems else []),
        *_orphan_reasons(s),
        *_partition_reasons(s),
        *_remote_reasons(s),
        "The full summary is in retention.runs.",
    ]
    raise RetentionIncomplete(" ".join(parts))


def _dirty_headline(s: RunSummary) -> str:
    """The message's first sentence: which run, and whether rows older than the cutoff
    remain (how many) or the run is dirty for another reason (the lines after say which)."""
    left = s.rows_remaining
    return f"{s.dag_id} run {s.run_id} is dirty: " + (
        f"{left} rows older than cutoff {s.cutoff} remain in {s.table}."
        if left
        else f"no rows older than cutoff {s.cutoff} remain in {s.table}, but:"
    )


def _window_reasons(s: RunSummary) -> list[str]:
    """The windows' part: those that did not finish, the rows left inside planned windows
    (listed), and those outside every window, with what reaches them: each points the
    reader at a different fix (the task's error, a rerun, the next plan)."""
    parts = []
    if s.windows_unfinished:
        parts.append(
            f"Windows that failed, did not finish or never ran: "
            f"{', '.join(s.windows_unfinished)} "
            "(see retention.windows.state and last_error, and the task logs)."
        )
    if s.rows_remaining_in_windows:
        listed = ", ".join(f"{w.label}: {w.rows_remaining}" for w in s.dirty_windows)
        parts.append(f"{s.rows_remaining_in_windows} are inside planned windows ({listed}).")
    if s.rows_outside_windows:
        parts.append(
            f"{s.rows_outside_windows} are outside every planned window "
            "(rows written with old timestamps after planning, or old rows with keys beyond "
            "the probed range); the next run plans the whole key range to reach them."
        )
    return parts


def _orphan_reasons(s: RunSummary) -> list[str]:
    """Child rows: orphans counted (a dirty run: they are old rows retention cannot reach
    through the parent), and children whose count timed out (said, so that the absence of
    a count is not read as none; not dirty for it)."""
    parts = []
    if s.orphans:
        listed = ", ".join(f"{table}: {rows}" for table, rows in s.orphans.items())
        parts.append(
            f"Orphans in child tables without a foreign key constraint ({listed}): child "
            "rows whose parent key no longer exists (deleted outside retention, or before "
            "the child was listed); delete them, or add the constraint."
        )
    if s.orphans_not_counted:
        parts.append(
            f"Orphans not counted in {', '.join(s.orphans_not_counted)}: the count timed out "
            "(plan_statement_ms or lock_timeout) on a large or locked child table; the run "
            "is not dirty for it, and the next reconcile counts again."
        )
    return parts


def _partition_reasons(s: RunSummary) -> list[str]:
    """The partitions whose rows are outside the table (:func:`partition_evidence`), with
    where to look: no count of the table shows them, so the message must."""
    if not s.partition_problems:
        return []
    return [
        "Partitions: "
        + "; ".join(s.partition_problems)
        + ". A partition detached to be dropped holds rows older than the cutoff outside "
        "the table until it is; see retention.partition_drops and the runbook "
        "(docs/runbook.md, A dirty run)."
    ]


def _remote_reasons(s: RunSummary) -> list[str]:
    """A remote policy's part: rows no operation explains (nothing will delete them), and
    a backlog older than ``max_lag_hours`` (the drain is not keeping up), by state."""
    remote = s.remote
    if not remote:
        return []
    parts = []
    if remote.unexplained_rows:
        parts.append(
            f"{remote.unexplained_rows} of them have no pending, in-flight or dead "
            "operation explaining them."
        )
    lag, limit = remote.oldest_overdue_hours, s.max_lag_hours
    if lag is not None and limit is not None and lag > limit:
        parts.append(
            f"The oldest is {lag:.1f} hours past its cutoff, more than max_lag_hours "
            f"({limit:g}); backlog by state: {remote.eligible_rows_by_state}."
        )
    return parts


def explain_events(
    conn: Connection, policy: Policy, delivery: dict[str, Any] | None
) -> dict[str, Any]:
    """The policy's events by state, and what makes their delivery a problem.

    Dead events, events pending longer than ``max_lag_hours``, a receiver
    disabled by a 410, and this run's ``deliver_events`` failing or never
    running each make the run dirty: deletions that nobody hears of are not done.
    """
    lag = policy.max_lag_hours or 72.0
    row = conn.execute(query("outbox_stats"), {"policy": policy.name, "lag_hours": lag}).fetchone()
    assert row is not None
    by_state = dict(row["events_by_state"])
    disabled = row["endpoint_disabled_at"]
    problems: list[str] = []
    if by_state.get("dead"):
        problems.append(
            f"{by_state['dead']} dead event(s): list them in retention.dead_events and replay "
            "them with retention__replay (kind: events)"
        )
    if row["overdue"]:
        problems.append(f"{row['overdue']} event(s) pending for more than {lag:g} hours")
    if disabled:
        problems.append(f"the receiver is disabled since {disabled.isoformat()} (410 Gone)")
    if delivery is None:
        problems.append("deliver_events did not run in this run")
    elif delivery.get("error"):
        problems.append(f"deliver_events failed: {delivery['error'][:300]}")
    pending = by_state.get("pending", 0) + by_state.get("in_flight", 0)
    return {
        # Counted by reconcile, after this run's deliver_events task ended: final for the run.
        "delivered_this_run": int((delivery or {}).get("done", 0)),
        "pending_after_delivery": pending,
        "pending_why": _pending_why(pending, delivery),
        "by_state": by_state,
        "overdue": int(row["overdue"]),
        "endpoint_disabled_at": disabled.isoformat() if disabled else None,
        "delivery": delivery,
        "problems": problems,
    }


def _pending_why(pending: int, delivery: dict[str, Any] | None) -> str | None:
    """Why events are still pending after this run's delivery, in words."""
    if not pending:
        return None
    if not delivery or delivery.get("skipped") or delivery.get("error"):
        return "this run delivered nothing; the next run's deliver_events sends them"
    stopped = delivery.get("stopped")
    if delivery.get("out_of_time") or stopped:
        return f"delivery stopped ({stopped or 'time budget spent'}); the next run sends the rest"
    return "retrying (backing off) or created after the delivery pass; the next run sends them"


def explain_remote(
    conn: Connection, policy: Policy, cutoff: dt.datetime, since: dt.datetime
) -> dict[str, Any]:
    """Explain each remaining eligible row by its operation's state, plus the run's figures."""
    assert policy.remote is not None
    target = TargetTable.of(policy.table_spec, policy.remote)
    params = {
        "policy": policy.name,
        "revision": policy.revision,
        "table_name": policy.table,
        "cutoff": cutoff,
        "hold_policy": policy.name,
        "derivatives": bool(policy.remote.derivatives),
    }
    with bounded(conn, policy.timeouts, reads=True, timezone=policy.timestamp_timezone):
        rows = conn.execute(target.query("ops_reconcile"), params).fetchall()
    by_state = {row["state"]: int(row["n"]) for row in rows}
    # A discarded dead operation is explained by the person who recorded why it stays
    # (retention.discards); nobody works on it, so it is no overdue backlog either.
    oldest = min(
        (
            as_aware(row["oldest"], policy.timestamp_timezone)
            for row in rows
            if row["state"] not in ("discarded", "held")
        ),
        default=None,
    )
    overdue = None
    if oldest is not None:
        became_eligible = oldest + dt.timedelta(days=policy.retain_days)
        overdue = max(0.0, (dt.datetime.now(dt.UTC) - became_eligible).total_seconds() / 3600)
    stats = conn.execute(
        query("ops_run_stats"),
        {"policy": policy.name, "since": since, "scope": policy.remote.scope},
    ).fetchone()
    assert stats is not None
    attempts = dict(stats["attempts_by_outcome"])
    return {
        "eligible_rows_by_state": by_state,
        # A done operation whose row is still there is as unexplained as no operation.
        "unexplained_rows": by_state.get("unexplained", 0) + by_state.get("done", 0),
        "oldest_overdue_hours": None if overdue is None else round(overdue, 2),
        "attempts_by_outcome": attempts,
        "rate_limited_responses": attempts.get("rate_limited", 0),
        "lease_expiries": int(stats["lease_expiries"]),
        "dead_total": int(stats["dead_total"]),
        "ledger_backlog": dict(stats["ledger_backlog"]),
        "effective_rate": stats["effective_rate"],
    }


def _round(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)
