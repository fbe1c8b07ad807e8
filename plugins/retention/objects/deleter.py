"""The object strategy of the window deleter: delete through the API first, then the row.

A window enqueues one operation per eligible row, then works one bounded pass
of the shared worker over its own operations and returns: it never sleeps out
a backoff or a Retry-After while holding a pool slot. What is snoozed or
backing off stays pending for a later ``drain_operations`` step, and reconcile
reports it as backlog. The pass's batches are counted in the window ledger by
the atomic finish itself (``ops_finish.sql``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.objects.operations import OperationsKind, enqueue_window
from retention.policy.model import Policy
from retention.queue.http import HttpSender
from retention.queue.limiter import TokenBucket
from retention.queue.worker import Worker, WorkerStats
from retention.rows.lifecycle import WindowDeleter, WindowResult
from retention.rows.windows import Window


def work_operations(
    conn: Connection,
    policy: Policy,
    sender: HttpSender,
    *,
    scope: str | None = None,
    budget_seconds: float | None = None,
) -> WorkerStats:
    """One bounded pass over a policy's due operations (of one window, if ``scope``)."""
    assert policy.remote is not None
    worker = Worker(
        conn,
        OperationsKind(policy, sender),
        budget_seconds=budget_seconds or policy.remote.task_budget_seconds,
        limiter=TokenBucket.for_remote(conn, policy.remote),
    )
    return worker.run(scope)


@dataclass
class ObjectDeleter(WindowDeleter):
    """Deletes each eligible row's remote object, then the row, through the operation ledger."""

    policy: Policy
    open_sender: Callable[[], HttpSender]

    def delete(
        self, conn: Connection, window: Window, batch_rows: int, result: WindowResult
    ) -> None:
        enqueued = enqueue_window(conn, self.policy, window, batch_rows)
        with closing(self.open_sender()) as sender:
            stats = work_operations(conn, self.policy, sender, scope=window.window_key)
        for rows, elapsed_ms in stats.batches:
            result.add_batch(rows, elapsed_ms)
        row = conn.execute(
            query("ops_window_unfinished"), {"window_key": window.window_key}
        ).fetchone()
        left = int(row["unfinished"]) if row else 0
        if left:
            result.note = f"{left} operations left pending for the drain step (backlog)"
        result.details = {"enqueued": enqueued, "remote": stats.as_dict()}
