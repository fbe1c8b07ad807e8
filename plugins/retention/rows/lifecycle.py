"""One window attempt, whatever deletes it: start, finish or failure in the window ledger.

Both deletion strategies (rows deleted directly, objects deleted through an
API first) run inside :func:`window_attempt`, so every attempt is recorded the
same way: ``running`` with its attempt counted when it starts, then ``done``
(``counted`` in a dry run), ``failed`` with the error, its time and its
timeouts, or ``cancelled`` when a SIGTERM stopped it between batches (the run
then gets a partial summary). The closing write always commits synchronously, whatever the
session's setting: it is the evidence that the window's work happened.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from retention import metrics
from retention.db.connection import Connection, bounded
from retention.db.gate import Gate
from retention.db.sqlfiles import query
from retention.policy.model import TableSpec, Timeouts
from retention.progress import plural, progress_line
from retention.rows.target import TargetTable
from retention.rows.windows import Window
from retention.runs.lease import record_stopped_run
from retention.stopping import StopRequested, disarm, stop_requested

log = logging.getLogger(__name__)


@dataclass
class WindowResult:
    """What one attempt on a window did (one XCom value)."""

    window_key: str
    label: str = ""
    rows_deleted: int = 0
    rows_counted: int | None = None
    batches: int = 0
    timeouts: int = 0
    seconds: float = 0.0
    batch_ms: list[float] = field(default_factory=list)
    note: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    pause: dict[str, Any] = field(default_factory=dict)  # the gate's totals
    # Time the strategy waited besides the gate's pauses, by reason (a remote window's wait
    # for the API's rate limit): in the log lines, which must show the same throttled time
    # as the strategy's own lines, but not in the ledger's paused_seconds, from which the
    # next plan measures the rate while working (a rate-limited API is the work's pace).
    waited: dict[str, float] = field(default_factory=dict)
    # Rows deleted by table: the policy's and each listed child's (rows_deleted counts the
    # policy's table only, as the window ledger does).
    rows_by_table: dict[str, int] = field(default_factory=dict)
    # Where a remote window's pass spent its time (``retention.queue.bound.PassTime``'s
    # figures), summed into the ledger's drain_time for the run's verdict on its bound.
    drain_time: dict[str, Any] = field(default_factory=dict)
    # Row batches whose delete carried the held-row predicate (a hold could keep a row, or
    # the policy has a hold_column); the others ran without it, none being possible.
    hold_checked_batches: int = 0

    @property
    def longest_batch_ms(self) -> float:
        return max(self.batch_ms, default=0.0)

    def throttled(self) -> dict[str, float]:
        """Seconds throttled by reason: the gate's pauses and pacing, and what else it waited."""
        reasons = dict(self.pause.get("pause_reasons") or {})
        for reason, seconds in self.waited.items():
            reasons[reason] = reasons.get(reason, 0.0) + seconds
        return reasons

    def add_batch(
        self, rows: int, elapsed_ms: float, by_table: dict[str, int] | None = None
    ) -> None:
        self.batches += 1
        self.rows_deleted += rows
        self.batch_ms.append(elapsed_ms)
        for table, count in (by_table or {}).items():
            self.rows_by_table[table] = self.rows_by_table.get(table, 0) + count

    def as_dict(self) -> dict[str, Any]:
        return {
            "window_key": self.window_key,
            "label": self.label,
            "rows_deleted": self.rows_deleted,
            "rows_counted": self.rows_counted,
            "batches": self.batches,
            "timeouts": self.timeouts,
            "seconds": round(self.seconds, 3),
            "longest_batch_ms": round(self.longest_batch_ms, 1),
            "note": self.note,
            **(
                {"rows_deleted_by_table": self.rows_by_table} if len(self.rows_by_table) > 1 else {}
            ),
            **(
                {"hold_checked_batches": self.hold_checked_batches}
                if self.hold_checked_batches
                else {}
            ),
            **(
                {"pause": self.pause}
                if self.pause.get("pauses") or self.pause.get("paced_seconds")
                else {}
            ),
            **self.details,
        }


@contextmanager
def window_attempt(conn: Connection, window: Window, *, dry_run: bool) -> Iterator[WindowResult]:
    """Record the attempt's start, yield its result to fill, record how it ended."""
    result = WindowResult(window_key=window.window_key, label=window.label)
    started = time.perf_counter()
    conn.execute(query("window_start"), {"window_key": window.window_key})
    try:
        yield result
    except BaseException as exc:
        result.seconds = time.perf_counter() - started
        # Stopped on request: between batches, or by the cancel of a statement in flight.
        stopped = isinstance(exc, StopRequested) or (
            isinstance(exc, psycopg.errors.QueryCanceled) and stop_requested()
        )
        disarm()  # the writes below record the stop: never cancel them
        state = "cancelled" if stopped else "failed"
        try:
            close_window(conn, window, result, state=state, error=exc)
            if stopped:
                record_stopped_run(conn, window.policy, window.run_id, str(exc))
        except Exception:  # the connection may be gone; the original error matters more
            log.exception(
                "%s: could not record in retention.windows that it %s", window.label, state
            )
        metrics.window_seconds(window.policy, state, result.seconds)
        if stopped:
            log.warning(
                "%s",
                progress_line(
                    window.label,
                    result.rows_deleted,
                    window.expected_rows,
                    result.seconds,
                    result.throttled(),
                    final=True,
                    verb="cancelled after deleting",
                    extra=f"{plural(result.batches, 'batch', 'batches')} ({exc})",
                ),
            )
        raise
    result.seconds = time.perf_counter() - started
    close_window(conn, window, result, state="counted" if dry_run else "done", error=result.note)
    metrics.window_seconds(window.policy, "counted" if dry_run else "done", result.seconds)
    log.info(
        "%s",
        progress_line(
            window.label,
            (result.rows_counted or 0) if dry_run else result.rows_deleted,
            window.expected_rows,
            result.seconds,
            result.throttled(),
            final=True,
            verb="counted" if dry_run else "deleted",
            extra=(
                ""
                if dry_run
                else f"{plural(result.batches, 'batch', 'batches')}, longest "
                f"{result.longest_batch_ms:.0f} ms, {plural(result.timeouts, 'timeout')}"
            )
            + (f"; {result.note}" if result.note else ""),
        ),
    )


def close_window(
    conn: Connection,
    window: Window,
    result: WindowResult,
    *,
    state: str,
    error: BaseException | str | None,
) -> None:
    """Close a window attempt in the ledger, committed synchronously (``SET LOCAL``)."""
    if isinstance(error, BaseException):
        error = f"{type(error).__name__}: {error}"[:500]
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = on")
        conn.execute(
            query("window_finish"),
            {
                "window_key": window.window_key,
                "state": state,
                "seconds": result.seconds,
                "timeouts": result.timeouts,
                "rows_counted": result.rows_counted,
                "last_error": error,
                "pauses": result.pause.get("pauses", 0),
                "paused_seconds": result.pause.get("paused_seconds", 0.0),
                "pause_reasons": Jsonb(result.pause.get("pause_reasons") or {}),
                "drain_time": Jsonb(result.drain_time),
            },
        )


def count_window(conn: Connection, table: TableSpec, timeouts: Timeouts, window: Window) -> int:
    """Eligible rows still inside the window's bounds (read-only)."""
    target = TargetTable.of(table)
    with bounded(conn, timeouts, reads=True, timezone=table.timestamp_timezone):
        row = conn.execute(
            target.query("target_count_window", window.tenant_scope),
            {
                "first_id": window.first_id,
                "last_id": window.last_id,
                "cutoff": window.cutoff,
                "tenant": window.tenant,
                "hold_policy": window.policy,
            },
        ).fetchone()
    return int(row["n"]) if row else 0


@dataclass
class WindowDeleter(ABC):
    """A deletion strategy for one window, chosen once when the DAG is built.

    Subclasses implement :meth:`delete`; :meth:`run` wraps it in the window
    lifecycle and handles dry runs (count, delete nothing, call nothing) the
    same way for every strategy.
    """

    table: TableSpec
    timeouts: Timeouts

    @abstractmethod
    def delete(
        self, conn: Connection, window: Window, batch_rows: int, result: WindowResult, gate: Gate
    ) -> None:
        """Delete the window's eligible rows (and whatever they name), filling ``result``.

        ``gate.wait`` goes between batches (or before each claim): it pauses for
        the pause switch and the database's health.
        """

    @abstractmethod
    def gate_for(self, window: Window) -> Gate:
        """The gate of one window attempt (the policy's health limits and pause switch)."""

    def run(
        self, conn: Connection, window: Window, *, batch_rows: int, dry_run: bool
    ) -> WindowResult:
        with window_attempt(conn, window, dry_run=dry_run) as result:
            if dry_run:
                result.rows_counted = count_window(conn, self.table, self.timeouts, window)
            else:
                gate = self.gate_for(window)
                try:
                    self.delete(conn, window, batch_rows, result, gate)
                finally:  # recorded with the window, whether it finished or failed
                    result.pause = gate.totals()
        return result
