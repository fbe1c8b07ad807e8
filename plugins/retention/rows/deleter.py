"""Delete one window in short, bounded, idempotent transactions.

Each sub-batch covers the next keys of the window (found by a read of the key
index) and deletes the eligible rows in that key range, in its own transaction
with ``lock_timeout`` and ``statement_timeout`` set, counting them in the
window ledger inside that same transaction.  Deleting a key range rather than a
``LIMIT`` subquery keeps Postgres on one index range scan, which is what lets
batched deletes keep up with a single big ``DELETE``.  The first batch has
``batch_rows`` keys; later ones are sized to take ``target_batch_ms`` (the
time-aimed batching of GitLab's batched migrations).  A sub-batch that times
out is rolled back and retried at half the size.  Only a single row that keeps
timing out fails the window, so a green task always means the window is empty.
Re-running a window deletes 0.

Legal holds: a batch's delete keeps the rows a hold matches (``AND NOT {held}``,
``include/sql/hold_row_held.sql``). Read row by row, that predicate costs about a fifth
of the deleter's rate even when nothing is held, so each batch first asks, in the same
statement that reads its key range, whether any active hold of the policy or of every
policy could match a row of the table (``hold_row_possible.sql``); when none could and
the policy has no ``hold_column``, the batch runs its delete rendered without the
predicate. Both variants are rendered once per window (:class:`BatchStatements`).

The promise is unchanged: a hold placed while a window runs applies from the next
batch. Every batch is one READ COMMITTED transaction whose first query (after its
``SET LOCAL`` timeouts) is that probe, so a hold committed before a batch begins is seen
by its probe, and the batch runs the delete that keeps held rows. The probe reads the
holds as of its own snapshot, taken when it starts; the delete takes a newer one. A hold
committed between the two (during the probe's key scan or the round trip after it) is
visible to the delete's snapshot, yet this batch ran the delete without the predicate
and does not keep its rows; before, only a hold committed after the delete's snapshot
was missed. So the moment after which a hold waits for the next batch moved earlier by
the probe's run time and one round trip, and stays inside the batch's transaction: both
holds were placed while the batch ran, and both apply from the next batch, whose probe
comes later.

This is the row strategy of :class:`~retention.rows.lifecycle.WindowDeleter`;
the object strategy (``retention.objects.deleter``) deletes through an API first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from retention import metrics
from retention.db.connection import Connection, bounded
from retention.db.gate import Gate, PauseSwitch
from retention.db.sqlfiles import query
from retention.holds.predicate import HOLD_MATCHES_PARAM, HOLD_POLICY_PARAM, holds_possible
from retention.policy.model import BatchTiming, HealthSpec, Policy, TableSpec
from retention.progress import Progress
from retention.rows.children import ChildLink, check_coupled_tables, family_delete
from retention.rows.lifecycle import WindowDeleter, WindowResult
from retention.rows.locks import find_lock_holders
from retention.rows.target import TargetTable
from retention.rows.windows import Window
from retention.stopping import raise_if_stopping, stoppable_sleep

log = logging.getLogger(__name__)

MAX_GROWTH = 1.10  # per batch, when batches run faster than the target
MAX_SHRINK = 0.80  # per batch, when they run slower
SMOOTHING = 0.3  # weight of the newest batch in the moving average of ms per row
MAX_TIMEOUTS_AT_ONE_ROW = 5
MAX_SKIPPED_ROWS = 20  # more locked rows than this: a bulk lock, not a stray one; stop

# Counts one batch inside the batch's own transaction: the rows it deleted by table (the
# policy's table and each listed child). The default is the window ledger
# (window_batch_done.sql); an erasure's pass, whose window names no row of
# retention.windows, counts toward the erasure instead.
BatchTally = Callable[[Connection, dict[str, int]], None]


class WindowDeleteError(RuntimeError):
    """A window could not be emptied (a row stayed locked or too slow to delete)."""


@dataclass
class BatchSizer:
    """Size batches by time: move towards ``target_ms`` per batch; halve on a timeout.

    After each batch the time per row is folded into a moving average and the
    size moves towards ``target_ms / ms_per_row``, at most +10% or -20% per
    step (the damping of GitLab's batched migrations), within [low, high].  A
    timeout halves the size at once and may go below ``low``, down to one row:
    a locked row must be isolated whatever the timing says.
    """

    start: int
    timing: BatchTiming = field(default_factory=BatchTiming)
    size: int = 0
    ms_per_row: float | None = None

    def __post_init__(self) -> None:
        self.size = min(self.size or self.start, self.timing.max_rows)

    def timed_out(self) -> None:
        self.size = max(1, self.size // 2)

    def succeeded(self, elapsed_ms: float, keys: int) -> None:
        per_row = elapsed_ms / max(keys, 1)
        if self.ms_per_row is None:
            self.ms_per_row = per_row
        else:
            self.ms_per_row += SMOOTHING * (per_row - self.ms_per_row)
        ideal = self.timing.target_ms / max(self.ms_per_row, 1e-6)
        step = min(MAX_GROWTH, max(MAX_SHRINK, ideal / self.size))
        moved = round(self.size * step)
        if step > 1:
            moved = max(moved, self.size + 1)  # a size of 1 must be able to grow
        self.size = min(self.timing.max_rows, max(self.timing.min_rows, moved))


@dataclass(frozen=True)
class BatchStatements:
    """The statements of a window's batches, rendered once per window: the probe of the
    key range's bound (which also reads whether an active hold could keep a row of the
    table), and the delete of the policy's rows, which for a policy with children is one
    statement deleting them and their children (``tables``: the table each of its result
    columns counts). The delete comes with the held-row predicate and, unless the policy
    has a ``hold_column`` (which only the row itself can tell), without it."""

    bound: sql.Composed
    held_delete: sql.Composed  # keeps held rows: AND NOT {held}
    unheld_delete: sql.Composed | None  # for a batch no hold can touch; None: hold_column
    tables: list[str]
    hold_matches: list[str]  # the holds' matches the predicate asks of this table

    @classmethod
    def of(cls, table: TableSpec, window: Window, children: list[ChildLink]) -> BatchStatements:
        target, scope = TargetTable.of(table), window.tenant_scope
        bound = query(
            "target_batch_bound_holds",
            bound=target.query("target_batch_bound", scope),
            holds=holds_possible(),
        )

        def delete(holds: bool) -> tuple[sql.Composed, list[str]]:
            if not children:
                statement = target.query("target_delete_batch", scope, holds_possible=holds)
                return statement, [str(table)]
            return family_delete(children, target, scope, str(table), holds_possible=holds)

        held_delete, tables = delete(True)
        unheld_delete = None if table.hold_column else delete(False)[0]
        return cls(bound, held_delete, unheld_delete, tables, target.hold_matches())

    def delete_for(self, holds_possible: bool) -> tuple[sql.Composed, bool]:
        """The delete for a batch whose probe read ``holds_possible``, and whether it
        carries the held-row predicate: it does whenever a hold could keep a row."""
        if holds_possible or self.unheld_delete is None:
            return self.held_delete, True
        return self.unheld_delete, False


@dataclass
class RowDeleter(WindowDeleter):
    """Deletes a window's eligible rows directly, in bounded key-range batches."""

    timing: BatchTiming = field(default_factory=BatchTiming)
    health: HealthSpec = field(default_factory=HealthSpec)
    switch: PauseSwitch | None = None
    sleep: Callable[[float], None] = field(default=stoppable_sleep)
    # The policy, for its listed children: resolved against the catalog when a window
    # starts (never when the DAG is parsed), and deleted with their parents in each batch.
    policy: Policy | None = None
    # Where each batch is counted, in its own transaction (None: the window ledger).
    tally: BatchTally | None = None

    def gate_for(self, window: Window) -> Gate:
        health, switch = self.health, self.switch
        return Gate(window.policy, health, self.table, switch, sleep=self.sleep, label=window.label)

    def delete(
        self, conn: Connection, window: Window, batch_rows: int, result: WindowResult, gate: Gate
    ) -> None:
        """Delete the window batch by batch; a row that stays locked is skipped, not waited on.

        Once the rest of the window is done, skipped rows fail the task with
        their keys named (reconcile reports them as rows left in the window),
        so one locked row never holds back the rows after it.
        """
        children = self._children(conn)
        statements = BatchStatements.of(self.table, window, children)
        sizer = BatchSizer(start=batch_rows, timing=self.timing)
        after = window.first_id - 1
        timeouts_at_one = 0
        skipped: list[int] = []
        progress = Progress(window.label, window.expected_rows, logger=log)
        while True:
            raise_if_stopping(f"window {window.label}")  # SIGTERM: no new batch
            gate.wait(conn)  # the pause switch and the database's health, between batches
            size = sizer.size
            params = {
                "after": after,
                "last_id": window.last_id,
                "cutoff": window.cutoff,
                "batch_rows": size,
                "tenant": window.tenant,
                HOLD_POLICY_PARAM: window.policy,
                HOLD_MATCHES_PARAM: statements.hold_matches,
            }
            began = time.perf_counter()
            try:
                done = self._batch(conn, statements, params, window, began, bool(children))
                if done is None:
                    break
                bound, batch_tables, held = done
                deleted = batch_tables[str(self.table)]
            except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:
                why = self._count_timeout(conn, window, exc, after, size, result)
                if size == 1:
                    timeouts_at_one += 1
                    if timeouts_at_one >= MAX_TIMEOUTS_AT_ONE_ROW:
                        key = self._next_key(conn, statements.bound, params, window)
                        skipped.append(key)
                        if len(skipped) > MAX_SKIPPED_ROWS:
                            raise WindowDeleteError(
                                f"window {window.label} ({window.window_key}): more than "
                                f"{MAX_SKIPPED_ROWS} rows stayed locked (keys {skipped[:10]}…): "
                                "another session holds many of them. Stopped instead of "
                                "skipping them one by one; rows before key "
                                f"{skipped[0]} are deleted. Retry once the locks are gone."
                            ) from exc
                        log.warning(
                            "%s: row %s timed out %d times even alone; skipping it and going "
                            "on with the rest of the window. Last time it %s",
                            window.label,
                            key,
                            timeouts_at_one,
                            why,
                        )
                        after, timeouts_at_one = key, 0
                        continue
                    self.sleep(min(30.0, 0.5 * 2**timeouts_at_one))
                log.warning(
                    "%s: batch of %d key%s after %d %s; retrying with %d",
                    window.label,
                    size,
                    "" if size == 1 else "s",
                    after,
                    why,
                    max(1, size // 2),
                )
                sizer.timed_out()
                continue
            batch_ms = (time.perf_counter() - began) * 1000
            timeouts_at_one = 0
            result.add_batch(deleted, batch_ms, batch_tables)
            result.hold_checked_batches += int(held)
            metrics.row_batch(window.policy, batch_tables, batch_ms)
            sizer.succeeded(batch_ms, bound["keys"])
            progress.update(result.rows_deleted, gate.throttled())
            if bound["keys"] < size:
                break  # the window's last batch: nothing left to pace
            gate.pace(batch_ms / 1000)
            after = bound["upto"]
        if skipped:
            raise WindowDeleteError(
                f"window {window.label} ({window.window_key}): {len(skipped)} row(s) stayed "
                f"locked or too slow to delete even alone and were skipped: keys "
                f"{skipped[:20]}; the rest of the window was deleted. Clear the task to "
                "retry them once the lock is gone; nothing was lost."
            )

    def _batch(
        self,
        conn: Connection,
        statements: BatchStatements,
        params: dict[str, Any],
        window: Window,
        began: float,
        with_children: bool,
    ) -> tuple[dict[str, Any], dict[str, int], bool] | None:
        """One batch in one bounded transaction: its key range (and whether a hold could
        keep a row), its rows with their children, and its tally (the window ledger's, or
        ``tally``'s); None once the window has no key left. Returns the range's bound, the
        rows deleted by table, and whether the delete carried the held-row predicate."""
        with bounded(
            conn,
            self.timeouts,
            synchronous_commit=False,
            timezone=self.table.timestamp_timezone,
        ):
            bound = conn.execute(statements.bound, params).fetchone()
            if bound is None or not bound["keys"]:
                return None
            in_range = {**params, "upto": bound["upto"]}
            delete, held = statements.delete_for(bound["holds_possible"])
            if with_children:  # one statement: the rows and their children, counted
                counted = conn.execute(delete, in_range).fetchone()
                assert counted is not None
                by_table = dict(zip(statements.tables, counted.values(), strict=True))
                deleted = by_table[str(self.table)]
            else:
                deleted = conn.execute(delete, in_range).rowcount
                by_table = {str(self.table): deleted}
            if self.tally is not None:
                self.tally(conn, by_table)
            else:
                conn.execute(
                    query("window_batch_done"),
                    {
                        "window_key": window.window_key,
                        "deleted": deleted,
                        "batch_ms": (time.perf_counter() - began) * 1000,
                        "by_table": Jsonb(by_table if with_children else {}),
                    },
                )
        return bound, by_table, held

    def _children(self, conn: Connection) -> list[ChildLink]:
        """The policy's listed children, resolved against the catalog (which also refuses
        a foreign key nobody accounts for, as the run's first task did)."""
        if self.policy is None or not self.policy.children:
            return []
        with bounded(conn, self.timeouts, reads=True):
            return check_coupled_tables(conn, self.policy).links

    def _count_timeout(
        self,
        conn: Connection,
        window: Window,
        exc: psycopg.Error,
        after: int,
        size: int,
        result: WindowResult,
    ) -> str:
        """Count a timed-out batch and say what stopped it, while the lock is still held:
        ``hit lock_timeout (100 ms) on public.t; held by pid …``. After a SIGTERM it is
        no timeout but the stop (the statement was cancelled, or the wait is moot):
        :class:`StopRequested`, never a retry."""
        raise_if_stopping(f"window {window.label}")
        result.timeouts += 1
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            holders = find_lock_holders(conn, self.table, window, after, size)
            return f"hit lock_timeout ({self.timeouts.lock_ms} ms) on {self.table}; {holders}"
        limit = self.timeouts.statement_ms
        return f"timed out ({type(exc).__name__}, statement_timeout {limit} ms)"

    def _next_key(
        self, conn: Connection, bound_statement: Any, params: dict[str, Any], window: Window
    ) -> int:
        """The key of the next row of the window after ``params['after']`` (read-only)."""
        try:
            with bounded(conn, self.timeouts, timezone=self.table.timestamp_timezone):
                row = conn.execute(bound_statement, {**params, "batch_rows": 1}).fetchone()
        except psycopg.errors.QueryCanceled as slow:
            raise WindowDeleteError(
                f"window {window.label} ({window.window_key}): even reading the next key after "
                f"{params['after']} timed out; the table or its key index is under heavy "
                "load. Retry later; nothing was lost."
            ) from slow
        assert row is not None
        return int(row["upto"])


def delete_window(
    conn: Connection,
    policy: Policy,
    window: Window,
    *,
    batch_rows: int,
    dry_run: bool,
    sleep: Callable[[float], None] = stoppable_sleep,
    switch: PauseSwitch | None = None,
) -> WindowResult:
    """Empty one window of a row policy (or, in a dry run, count it), recording the attempt."""
    deleter = RowDeleter(
        policy.table_spec,
        policy.timeouts,
        policy.batch_timing,
        policy.health,
        switch,
        sleep=sleep,
        policy=policy,
    )
    return deleter.run(conn, window, batch_rows=batch_rows, dry_run=dry_run)
