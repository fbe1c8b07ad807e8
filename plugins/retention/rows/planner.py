"""Plan a run: split the eligible key space into immutable windows and record them.

Planning costs a few index probes per window, never a walk of the rows: the
eligible key range comes from the key and timestamp indexes
(:mod:`retention.rows.probes`), the row count is the statistics' estimate, and
the range is cut by the key histogram (:mod:`retention.rows.sizing`) into
windows sized to carry about ``target_window_seconds`` of work each.  The plan
is recorded once per (policy, run id); a retried planner returns the recorded
plan unchanged, which is what makes the mapped deletes safe to retry.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query
from retention.db.table_check import TableMismatch, check_table
from retention.policy.model import Policy, TableSpec
from retention.progress import PhaseTimer, Step, duration, plural
from retention.rows.children import check_coupled_tables
from retention.rows.probes import KeyRange, RangeProbe, TableIndexes, key_histogram
from retention.rows.sizing import (
    cut_points,
    mass_share,
    rows_per_window,
    share_windows,
    window_count,
)
from retention.rows.target import TargetTable, TenantScope
from retention.rows.windows import Window, fit_to_map_limit

log = logging.getLogger(__name__)

MIN_MEASURED_WINDOW_ROWS = 1_000  # smaller windows measure Airflow's overhead, not deleting
# The planner's one refusal, under the name callers know: the policy does not fit the live
# table (retention.db.table_check, which the first task of the run already checked).
PlanError = TableMismatch


@dataclass(frozen=True)
class PlanRequest:
    """Everything a plan depends on; all of it comes from the run, none from 'now'."""

    policy: Policy
    run_id: str
    plan_id: str
    cutoff: dt.datetime
    anchor_source: str
    logical_date: dt.datetime | None
    window_rows: int | None  # None: sized by target_window_seconds
    batch_rows: int
    max_windows: int
    dry_run: bool
    min_windows: int = 1  # the pool's slots: fewer windows would leave slots idle


def plan_id_for(run_id: str, *moments: dt.datetime | None) -> str:
    """Identify one lifetime of a DAG run: task retries share it, a re-created run does not.

    ``moments`` are the DAG run's ``run_after`` and ``start_date``: both survive
    task retries, and at least one differs when a run is deleted and created
    again under the same run id (``airflow dags test`` twice, or the UI).
    """
    stamp = "|".join(m.astimezone(dt.UTC).isoformat() if m else "-" for m in moments)
    return f"{run_id}@{hashlib.sha256(stamp.encode()).hexdigest()[:12]}"


def load_plan(conn: Connection, policy: str, run_id: str) -> tuple[str, list[Window]] | None:
    """The latest recorded plan of a run (its plan_id and windows), or None."""
    run = conn.execute(query("run_for_id"), {"policy": policy, "run_id": run_id}).fetchone()
    if run is None:
        return None
    rows = conn.execute(query("window_for_plan"), {"policy": policy, "plan_id": run["plan_id"]})
    return run["plan_id"], [window_from_row(row) for row in rows]


def window_from_row(row: dict[str, Any]) -> Window:
    return Window(
        policy=row["policy"],
        run_id=row["run_id"],
        plan_id=row["plan_id"],
        window_no=row["window_no"],
        tenant_scope=row["tenant_scope"],
        tenant=row["tenant"],
        cutoff=row["cutoff"],
        first_id=row["first_id"],
        last_id=row["last_id"],
        expected_rows=row["expected_rows"],
    )


def tenant_groups(
    conn: Connection, policy: Policy, target: TargetTable, cutoff: dt.datetime, max_windows: int
) -> list[tuple[TenantScope, Any]]:
    """The tenant scopes to plan: one per tenant (plus NULL), or all at once if too many."""
    if target.tenant is None or not policy.window_per_tenant:
        return [("all", None)]
    with bounded(conn, policy.timeouts, reads=True, timezone=policy.timestamp_timezone):
        tenants = [
            row["tenant"]
            for row in conn.execute(target.query("target_tenants"), {"max_tenants": max_windows})
        ]
        has_null = conn.execute(
            target.query("target_null_tenant_eligible"), {"cutoff": cutoff}
        ).fetchone()
    groups: list[tuple[TenantScope, Any]] = [("one", tenant) for tenant in tenants]
    if has_null and has_null["present"]:
        groups.append(("null", None))
    if len(groups) > max_windows:
        log.warning(
            "policy %s plan: more than %d tenants; planning windows across all tenants "
            "(raise [core] max_map_length to keep one window group per tenant)",
            policy.name,
            max_windows,
        )
        return [("all", None)]
    return groups


def plan_group(
    probe: RangeProbe,
    request: PlanRequest,
    key_range: KeyRange,
    windows: int,
    histogram: list[int],
    first_window_no: int,
    step: Step | None = None,
) -> list[Window]:
    """Cut one scope's eligible key range into about ``windows`` contiguous windows.

    Cut points come from the histogram (equal shares of rows); each window's
    first key is snapped to a real key by one index probe, so no window starts
    in an empty stretch.  Windows are contiguous, so together they cover every
    key of the range, including keys inserted after planning.
    """
    first, last = key_range.first_id, key_range.last_id
    starts: list[int] = []
    cuts = cut_points(first, last, windows, histogram)
    for i, cut in enumerate(cuts):
        upto = cuts[i + 1] - 1 if i + 1 < len(cuts) else last
        snapped = first if i == 0 else probe.snap(key_range.scope, key_range.tenant, cut, upto)
        if snapped is not None and (not starts or snapped > starts[-1]):
            starts.append(snapped)
        if step is not None:
            step.tick(first_window_no + i + 1, None, "windows")
    planned: list[Window] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] - 1 if i + 1 < len(starts) else last
        share = mass_share(first, last, histogram, start, end)
        planned.append(
            Window(
                policy=request.policy.name,
                run_id=request.run_id,
                plan_id=request.plan_id,
                window_no=first_window_no + i,
                tenant_scope=key_range.scope,
                tenant=None if key_range.tenant is None else str(key_range.tenant),
                cutoff=request.cutoff,
                first_id=start,
                last_id=end,
                expected_rows=max(1, round(key_range.estimated_rows * share)),
            )
        )
    return planned


def measured_rows_per_second(conn: Connection, policy: str) -> float | None:
    """Rows/s of this policy's recent finished windows (None before it has any)."""
    row = conn.execute(
        query("window_throughput"), {"policy": policy, "min_rows": MIN_MEASURED_WINDOW_ROWS}
    ).fetchone()
    if not row or not row["windows"] or not row["seconds"]:
        return None
    return float(row["rows"]) / float(row["seconds"])


def indexes_found(table: TableSpec, indexes: TableIndexes) -> str:
    """``id indexed, created_at NOT indexed``: what the planner's first step found."""
    return ", ".join(
        f"{column} {'indexed' if indexed else 'NOT indexed'}"
        for column, indexed in (
            (table.key_column, indexes.key),
            (table.timestamp_column, indexes.timestamp),
        )
    )


def eligible_ranges(
    probe: RangeProbe, groups: list[tuple[TenantScope, Any]], timer: PhaseTimer
) -> list[KeyRange]:
    """The eligible key range of each group (one per tenant, each clipped to the table's
    eligible range), every probe step timed and logged."""
    with timer.step("key range probes") as step:
        whole = probe.eligible_range("all", None)
        step.found = (
            f"ids {whole.first_id}–{whole.last_id}, ~{whole.estimated_rows:,} rows"
            if whole
            else "no row older than the cutoff"
        )
    if groups == [("all", None)] or whole is None:
        return [whole] if whole is not None else []
    ranges: list[KeyRange] = []
    with timer.step("tenant probes") as step:
        for i, (scope, tenant) in enumerate(groups, 1):
            tenant_range = probe.within(whole, scope, tenant)
            if tenant_range is not None:
                ranges.append(tenant_range)
            step.tick(i, len(groups), "tenants")
        step.found = f"{len(ranges)} of {len(groups)} with eligible rows"
    return ranges


def plan_windows(conn: Connection, request: PlanRequest) -> list[Window]:
    """Return the run's windows, planning and recording them on first call."""
    policy = request.policy
    recorded = load_plan(conn, policy.name, request.run_id)
    if recorded is not None and recorded[0] == request.plan_id:
        log.info(
            "policy %s plan: reusing the recorded plan of %d windows (%s, run %s)",
            policy.name,
            len(recorded[1]),
            request.plan_id,
            request.run_id,
        )
        return recorded[1]
    if recorded is not None:
        log.info(
            "policy %s plan: planning afresh as %s (run %s was planned before as %s)",
            policy.name,
            request.plan_id,
            request.run_id,
            recorded[0],
        )
    started = time.perf_counter()
    timer = PhaseTimer(f"policy {policy.name} plan", logger=log)
    with timer.step("table check") as step:
        check_table(conn, policy)
        coupling = check_coupled_tables(conn, policy)
        target = TargetTable.of(policy.table_spec)
        indexes = TableIndexes.read(conn, policy.table_spec)
        step.found = indexes_found(policy.table_spec, indexes)
    notes: list[str] = []
    if not indexes.key:
        notes.append(
            f"no index on {policy.table_spec.key_column}: every probe and every batch "
            "reads the table; create one"
        )
    notes += coupling.warnings()  # unlisted ON DELETE CASCADE children: in the run summary
    left = conn.execute(query("run_rows_outside_windows"), {"policy": policy.name}).fetchone()
    whole = (
        f"the last run found {left['n']} old row(s) outside its windows"
        if left and left["n"]
        else None
    )
    probe = RangeProbe(conn, policy, target, indexes, request.cutoff, whole)
    with timer.step("tenants") as step:
        groups = tenant_groups(conn, policy, target, request.cutoff, request.max_windows)
        step.found = plural(len(groups), "window group")
    ranges = eligible_ranges(probe, groups, timer)
    notes += sorted({r.note for r in ranges if r.note})
    per_window = rows_per_window(
        request.window_rows,
        None if request.window_rows else measured_rows_per_second(conn, policy.name),
        policy.target_window_seconds,
    )
    estimates = [r.estimated_rows for r in ranges]
    counts = [window_count(e, per_window, request.max_windows) for e in estimates]
    if sum(counts) < request.min_windows:  # spread over the pool's slots when rows allow
        counts = share_windows(estimates, min(request.min_windows, sum(estimates)))
    with timer.step("histogram") as step:
        histogram = key_histogram(conn, policy.table_spec)
        step.found = f"{len(histogram)} bounds" if histogram else "none (no ANALYZE yet)"
    windows: list[Window] = []
    with timer.step("cutting windows") as step:
        for key_range, count in zip(ranges, counts, strict=True):
            windows += plan_group(probe, request, key_range, count, histogram, len(windows), step)
        step.found = f"{plural(len(windows), 'window')} of ~{per_window:,} rows"
    planned = len(windows)
    windows = fit_to_map_limit(windows, request.max_windows)
    if len(windows) < planned:
        log.info(
            "policy %s plan: widened %d windows to %d to stay within max_map_length %d",
            policy.name,
            planned,
            len(windows),
            request.max_windows,
        )
    for note in notes:
        log.warning("policy %s plan: %s", policy.name, note)
    with timer.step("recording"):
        record_plan(conn, request, windows, time.perf_counter() - started, per_window, notes)
        recorded = load_plan(conn, policy.name, request.run_id)
    planned_windows = recorded[1] if recorded else []
    log.info(
        "policy %s plan: %s, ~%s, planned in %s (%s)",
        policy.name,
        plural(len(planned_windows), "window"),
        plural(sum(w.expected_rows for w in planned_windows), "row"),
        duration(time.perf_counter() - started),
        timer.summary(),
    )
    return planned_windows


def record_plan(
    conn: Connection,
    request: PlanRequest,
    windows: list[Window],
    plan_seconds: float,
    per_window: int,
    notes: list[str],
) -> None:
    """Insert the run row and its windows in one transaction (first planner wins)."""
    policy = request.policy
    with conn.transaction():
        recorded = conn.execute(
            query("run_record_plan"),
            {
                "policy": policy.name,
                "run_id": request.run_id,
                "plan_id": request.plan_id,
                "dag_id": policy.dag_id,
                "table_name": str(policy.table),
                "logical_date": request.logical_date,
                "anchor_source": request.anchor_source,
                "cutoff": request.cutoff,
                "dry_run": request.dry_run,
                "window_rows": per_window,
                "batch_rows": request.batch_rows,
                "windows": len(windows),
                "rows_planned": sum(w.expected_rows for w in windows),
                "plan_seconds": plan_seconds,
                "plan_notes": Jsonb(notes) if notes else None,
            },
        )
        if recorded.rowcount == 0:
            # another planner of the same DAG run recorded its plan first: keep that one
            # whole (plans depend on statistics, so two planners may cut differently)
            return
        with conn.cursor() as cur:
            cur.executemany(
                query("window_insert"),
                [{**w.to_xcom(), "cutoff": w.cutoff} for w in windows],
            )
