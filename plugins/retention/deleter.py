"""Delete one window in short, bounded, idempotent transactions.

Each sub-batch covers the next ``batch_rows`` keys of the window (found by a
read of the key index) and deletes the eligible rows in that key range, in its
own transaction with ``lock_timeout`` and ``statement_timeout`` set, counting
them in the window ledger inside that same transaction.  Deleting a key range
rather than a ``LIMIT`` subquery keeps Postgres on one index range scan, which
is what lets batched deletes keep up with a single big ``DELETE``.  A sub-batch that
times out is rolled back and retried at half the size; after a run of quick
batches the size grows back (the adaptive batching of GitLab's batched
migrations).  Only a single row that keeps timing out fails the window, so a
green task always means the window is empty.  Re-running a window deletes 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from retention.db import Connection, bounded
from retention.policy import Policy
from retention.sqlfiles import query
from retention.target import TargetTable
from retention.windows import Window

log = logging.getLogger(__name__)

GROW_AFTER_FAST_BATCHES = 4
MAX_TIMEOUTS_AT_ONE_ROW = 5


class WindowDeleteError(RuntimeError):
    """A window could not be emptied (a row stayed locked or too slow to delete)."""


@dataclass
class WindowResult:
    """What one attempt on a window did."""

    window_key: str
    rows_deleted: int = 0
    rows_counted: int | None = None
    batches: int = 0
    timeouts: int = 0
    seconds: float = 0.0
    batch_ms: list[float] = field(default_factory=list)

    @property
    def longest_batch_ms(self) -> float:
        return max(self.batch_ms, default=0.0)

    def as_dict(self) -> dict[str, object]:
        return {
            "window_key": self.window_key,
            "rows_deleted": self.rows_deleted,
            "rows_counted": self.rows_counted,
            "batches": self.batches,
            "timeouts": self.timeouts,
            "seconds": round(self.seconds, 3),
            "longest_batch_ms": round(self.longest_batch_ms, 1),
        }


@dataclass
class BatchSizer:
    """Halve on timeout, double back after a streak of fast batches, never above the cap."""

    cap: int
    fast_ms: float
    size: int = 0
    fast_streak: int = 0

    def __post_init__(self) -> None:
        self.size = self.size or self.cap

    def timed_out(self) -> None:
        self.size = max(1, self.size // 2)
        self.fast_streak = 0

    def succeeded(self, elapsed_ms: float) -> None:
        if elapsed_ms < self.fast_ms:
            self.fast_streak += 1
            if self.fast_streak >= GROW_AFTER_FAST_BATCHES and self.size < self.cap:
                self.size = min(self.cap, self.size * 2)
                self.fast_streak = 0
        else:
            self.fast_streak = 0


def count_window(conn: Connection, policy: Policy, window: Window) -> int:
    """Eligible rows still inside the window's bounds (read-only)."""
    target = TargetTable.of(policy)
    with bounded(conn, policy, reads=True):
        row = conn.execute(
            target.query("count_window", window.tenant_scope),
            {
                "first_id": window.first_id,
                "last_id": window.last_id,
                "cutoff": window.cutoff,
                "tenant": window.tenant,
            },
        ).fetchone()
    return int(row["n"]) if row else 0


def delete_window(
    conn: Connection,
    policy: Policy,
    window: Window,
    *,
    batch_rows: int,
    dry_run: bool,
    sleep: Callable[[float], None] = time.sleep,
) -> WindowResult:
    """Empty one window (or, in a dry run, count it) and record the attempt in the ledger."""
    result = WindowResult(window_key=window.window_key)
    started = time.perf_counter()
    conn.execute(query("window_start"), {"window_key": window.window_key})
    try:
        if dry_run:
            result.rows_counted = count_window(conn, policy, window)
        else:
            _delete_batches(conn, policy, window, batch_rows, result, sleep)
    except Exception as exc:
        result.seconds = time.perf_counter() - started
        finish_window(conn, window, result, state="failed", error=exc)
        raise
    result.seconds = time.perf_counter() - started
    finish_window(conn, window, result, state="counted" if dry_run else "done", error=None)
    log.info(
        "window %s (%s): %s %d rows in %d batches, %.2fs, longest batch %.0f ms, %d timeouts",
        window.window_key,
        window.label,
        "counted" if dry_run else "deleted",
        result.rows_counted if dry_run else result.rows_deleted,
        result.batches,
        result.seconds,
        result.longest_batch_ms,
        result.timeouts,
    )
    return result


def _delete_batches(
    conn: Connection,
    policy: Policy,
    window: Window,
    batch_rows: int,
    result: WindowResult,
    sleep: Callable[[float], None],
) -> None:
    target = TargetTable.of(policy)
    bound_statement = target.query("batch_bound", window.tenant_scope)
    delete_statement = target.query("delete_batch", window.tenant_scope)
    sizer = BatchSizer(cap=batch_rows, fast_ms=policy.statement_timeout_ms / 4)
    after = window.first_id - 1
    timeouts_at_one = 0
    while True:
        size = sizer.size
        params = {
            "after": after,
            "last_id": window.last_id,
            "cutoff": window.cutoff,
            "batch_rows": size,
            "tenant": window.tenant,
        }
        began = time.perf_counter()
        try:
            with bounded(conn, policy, synchronous_commit=False):
                bound = conn.execute(bound_statement, params).fetchone()
                if bound is None or not bound["keys"]:
                    return
                deleted = conn.execute(delete_statement, {**params, "upto": bound["upto"]}).rowcount
                conn.execute(
                    query("window_batch_done"),
                    {
                        "window_key": window.window_key,
                        "deleted": deleted,
                        "batch_ms": (time.perf_counter() - began) * 1000,
                    },
                )
        except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:
            result.timeouts += 1
            if size == 1:
                timeouts_at_one += 1
                if timeouts_at_one >= MAX_TIMEOUTS_AT_ONE_ROW:
                    raise WindowDeleteError(
                        f"window {window.window_key} ({window.label}): the row after key "
                        f"{after} timed out {timeouts_at_one} times even alone "
                        f"({type(exc).__name__}); it is locked or too slow to delete. "
                        "The window is left for a retry; nothing was lost."
                    ) from exc
                sleep(min(30.0, 0.5 * 2**timeouts_at_one))
            log.warning(
                "window %s: batch of %d timed out (%s); retrying with %d",
                window.window_key,
                size,
                type(exc).__name__,
                max(1, size // 2),
            )
            sizer.timed_out()
            continue
        batch_ms = (time.perf_counter() - began) * 1000
        timeouts_at_one = 0
        result.batches += 1
        result.rows_deleted += deleted
        result.batch_ms.append(batch_ms)
        sizer.succeeded(batch_ms)
        if bound["keys"] < size:
            return
        after = bound["upto"]


def finish_window(
    conn: Connection,
    window: Window,
    result: WindowResult,
    *,
    state: str,
    error: BaseException | str | None,
) -> None:
    """Close a window attempt in the ledger (done, counted, or failed with its error)."""
    if isinstance(error, BaseException):
        error = f"{type(error).__name__}: {error}"[:500]
    conn.execute(
        query("window_finish"),
        {
            "window_key": window.window_key,
            "state": state,
            "seconds": result.seconds,
            "timeouts": result.timeouts,
            "rows_counted": result.rows_counted,
            "last_error": error,
        },
    )
