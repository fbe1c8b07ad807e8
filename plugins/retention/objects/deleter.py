"""The object strategy of the window deleter: delete through the API first, then the row.

A window enqueues one operation per eligible row, then works one bounded pass
of the shared worker over its own operations that are due now, and returns: it
never waits for one of its operations' own backoff or snooze while holding a
pool slot (it does wait for tokens of the shared bucket, within its time
budget, which includes a scope closed by another call's Retry-After). What is
snoozed or backing off stays pending for a later ``drain_operations`` step, and
reconcile reports it as backlog. Each batch is counted in the window ledger in
the transaction of its atomic finish, and the window's batch figures are those
transactions' (``WorkerStats.transactions``, from the kind's ``record``).

The deleter knows no transport: it opens the policy's kind of remote object
(``open_kind``; over HTTP that is ``OperationsKind``) and closes it after the pass.

Every pass ends with a verdict on what bounded it (``retention.queue.bound``: the API,
the pool's slots, or the database), logged and sent as the ``bound_by`` gauge; a
window records the time its passes measured in the window ledger (``drain_time``),
from which reconcile gives the run's verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass

from retention import metrics
from retention.db.connection import Connection, bounded
from retention.db.gate import Gate, PauseSwitch
from retention.db.sqlfiles import query
from retention.objects.enqueue import enqueue_missing_derivatives, enqueue_window
from retention.objects.kind import ObjectKind
from retention.policy.model import Policy
from retention.progress import Progress
from retention.queue.bound import DrainSetting, PoolWatch, judge, log_verdict
from retention.queue.limiter import TokenBucket
from retention.queue.worker import RATE_LIMIT, STOPPING, Worker, WorkerStats, stats_of
from retention.rows.lifecycle import WindowDeleter, WindowResult
from retention.rows.windows import Window
from retention.stopping import StopRequested

log = logging.getLogger(__name__)


def work_operations(
    conn: Connection,
    kind: ObjectKind,
    *,
    scope: str | None = None,
    budget_seconds: float | None = None,
    gate: Gate | None = None,
    progress: Progress | None = None,
    pool: PoolWatch | None = None,
) -> WorkerStats:
    """One bounded pass over a policy's due operations (of one window, if ``scope``).

    Before any call, the derivative operations that object operations lack are
    enqueued (an object enqueued before its derivatives were added), and the finish
    resolves the policy's children against the catalog (a foreign key nobody accounts
    for fails the pass before the API deletes what could not be recorded).
    Without a ``gate`` the policy's own health limits apply (no pause switch). ``pool``
    samples the pool's stats during the pass, for the verdict on what bounded it
    (without one, the verdict says the pool's share is unknown).
    """
    remote = kind.remote
    policy = kind.policy
    if remote.derivatives:
        with bounded(conn, policy.timeouts):
            enqueue_missing_derivatives(conn, policy)
    kind.prepare(conn)
    worker = Worker(
        conn,
        kind,
        budget_seconds=budget_seconds or remote.task_budget_seconds,
        limiter=TokenBucket.for_remote(conn, remote),
        gate=gate or Gate(policy.name, policy.health, policy.table_spec),
        progress=progress,
        pool=pool,
    )
    try:
        return worker.run(scope)
    finally:  # a pass that failed is judged on what it measured too
        tell_bound(policy, worker.stats, worker.progress.label)


def tell_bound(policy: Policy, stats: WorkerStats, label: str) -> None:
    """The verdict on what bounded one pass, in ``stats.bound``, the log and the metrics."""
    stats.bound = judge(stats.time, DrainSetting.of(policy))
    log_verdict(label, stats.bound)
    metrics.bound(policy.name, stats.bound)


@dataclass
class ObjectDeleter(WindowDeleter):
    """Deletes each eligible row's remote object, then the row, through the operation ledger."""

    policy: Policy
    open_kind: Callable[[], ObjectKind]
    switch: PauseSwitch | None = None
    # A watch of the pool's stats for one pass (the Airflow layer reads Airflow's pools).
    open_pool: Callable[[], PoolWatch] | None = None

    def gate_for(self, window: Window) -> Gate:
        return Gate(window.policy, self.policy.health, self.table, self.switch, label=window.label)

    def delete(
        self, conn: Connection, window: Window, batch_rows: int, result: WindowResult, gate: Gate
    ) -> None:
        gate.wait(conn)  # nothing is enqueued while the policy is paused or the database unwell
        enqueued = enqueue_window(conn, self.policy, window, batch_rows)
        progress = Progress(
            window.label,
            self._unfinished(conn, window),
            unit="operations",
            estimate=False,
            logger=log,
        )
        pool = self.open_pool() if self.open_pool is not None else None
        try:
            with closing(self.open_kind()) as kind:
                stats = work_operations(
                    conn, kind, scope=window.window_key, gate=gate, progress=progress, pool=pool
                )
        except BaseException as failed:  # what the pass measured before it failed counts
            if (done := stats_of(failed)) is not None:
                result.drain_time = done.time.to_json()
            raise
        result.drain_time = stats.time.to_json()
        for rows, elapsed_ms in stats.transactions:
            result.add_batch(rows, elapsed_ms)
        if stats.waited_for_tokens_seconds:  # the window's last line shows the worker's wait
            result.waited[RATE_LIMIT] = stats.waited_for_tokens_seconds
        if stats.stopped == STOPPING:  # the calls made are recorded; the rest is pending again
            result.details = {"enqueued": enqueued, "remote": stats.as_dict()}
            raise StopRequested(
                f"window {window.label}: stopped on request (SIGTERM) after "
                f"{stats.done + stats.retried + stats.dead} call(s); {stats.released} claimed "
                "operation(s) were released unstarted and stay pending"
            )
        left = self._unfinished(conn, window)
        if left:
            result.note = f"{left} operations left pending for the drain step (backlog)"
        result.details = {"enqueued": enqueued, "remote": stats.as_dict()}

    @staticmethod
    def _unfinished(conn: Connection, window: Window) -> int:
        """The window's operations still pending or in flight (read-only)."""
        row = conn.execute(
            query("ops_window_unfinished"), {"window_key": window.window_key}
        ).fetchone()
        return int(row["unfinished"]) if row else 0
