"""Run the remote and event workers in tests, against servers on loopback."""

from __future__ import annotations

from typing import Any

from retention.db.connection import Connection, connect_dsn
from retention.events.outbox import Signer, deliver_events
from retention.objects.deleter import work_operations
from retention.objects.enqueue import enqueue_window
from retention.objects.kind import OperationsKind
from retention.policy import Policy
from retention.queue.http import HttpSender, plain_sender
from retention.queue.worker import WorkerStats
from tests.support.tables import plan


def sandbox_sender(server: Any, timeout_seconds: float = 2.0) -> HttpSender:
    """A sender to a SandboxServer (or any server with ``url()``), without Airflow."""
    return plain_sender(server.url, timeout_seconds)


def enqueue_all(db: Connection, policy: Policy, batch_rows: int = 100, **plan_kw: Any) -> int:
    """Plan the policy's table and enqueue every window's operations."""
    return sum(enqueue_window(db, policy, w, batch_rows) for w in plan(db, policy, **plan_kw))


def work(dsn: str, policy: Policy, server: Any, **kw: Any) -> WorkerStats:
    """One worker pass on its own connection and session."""
    assert policy.remote is not None
    sender = sandbox_sender(server, policy.remote.request_timeout_seconds)
    try:
        with connect_dsn(dsn) as conn:
            return work_operations(conn, OperationsKind(policy, sender), **kw)
    finally:
        sender.close()


def deliver(dsn: str, policy: Policy, receiver: Any, **kw: Any) -> WorkerStats:
    """One delivery pass to a Receiver on loopback."""
    assert policy.notify is not None
    sender = plain_sender(receiver.url, policy.notify.timeout_seconds)
    try:
        with connect_dsn(dsn) as conn:
            return deliver_events(
                conn, policy.name, policy.notify, sender, Signer(receiver.secret, "test"), **kw
            )
    finally:
        sender.close()
