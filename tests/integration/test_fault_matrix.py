"""Kill -9 at every boundary, then run again: nothing is lost, nothing happens twice.

A forked worker process is killed with SIGKILL (no cleanup, no finally) right
after claiming, right after the remote call returned (before recording), in the
middle of a row batch's transaction, and right after an event's POST (before
marking it delivered). A fresh worker then runs with the leases expired, and:

- every eligible row is deleted exactly once (the window ledger agrees);
- every object has exactly one remote effect at the sandbox;
- every confirmed deletion has exactly one logical event at a deduplicating receiver;
- no operation or event is left in flight.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from devtools.plans import request
from devtools.receiver import Receiver, new_secret
from retention.db.connection import Connection, connect_dsn
from retention.events.outbox import EventsKind, Signer, deliver_events
from retention.objects.deleter import work_operations
from retention.objects.kind import OperationsKind
from retention.queue.http import plain_sender
from retention.queue.leased import LeasedQueue
from retention.rows.deleter import delete_window
from tests.support.policies import make_policy, remote_policy
from tests.support.remote import enqueue_all
from tests.support.tables import count, create_media_table, create_table, old, plan


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def killed_after(target: Any, name: str) -> None:
    """Make ``target.name`` run, then kill this process before anything else happens."""
    original = getattr(target, name)

    def then_die(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        die()

    setattr(target, name, then_die)


def in_child(body: Callable[[], None]) -> int:
    """Run ``body`` in a forked process; returns its exit code (-9 when it was killed)."""
    child = multiprocessing.get_context("fork").Process(target=body)
    child.start()
    child.join(60)
    assert child.exitcode is not None, "the child hung"
    return child.exitcode


def expire(db: Connection, table: str, policy: str) -> None:
    db.execute(
        f"UPDATE retention.{table} SET lease_expires_at = now() - interval '1 second' "  # noqa: S608
        "WHERE policy = %s AND state = 'in_flight'",
        (policy,),
    )


@pytest.mark.parametrize("boundary", ["after claiming", "after the call, before recording"])
def test_a_killed_remote_worker_loses_nothing_and_repeats_nothing(
    db, unique_name, sandbox, test_dsn, boundary: str
) -> None:
    create_media_table(db, unique_name, 12)
    policy = remote_policy(unique_name, claim_batch=5)
    enqueue_all(db, policy)
    url = sandbox.url

    def work_then_die() -> None:
        if boundary == "after claiming":
            killed_after(LeasedQueue, "claim")
        else:
            killed_after(OperationsKind, "send")
        with connect_dsn(test_dsn) as conn:
            work_operations(conn, OperationsKind(policy, plain_sender(url, 2)))

    assert in_child(work_then_die) == -signal.SIGKILL
    stuck = count(
        db,
        "SELECT count(*) FROM retention.operations WHERE policy = %s AND state = 'in_flight'",
        policy.name,
    )
    assert stuck == 5, "the killed worker's batch (claim_batch 5) is in flight under its lease"
    expire(db, "operations", policy.name)
    with connect_dsn(test_dsn) as conn:
        work_operations(conn, OperationsKind(policy, plain_sender(url, 2)))
    states = db.execute(
        "SELECT state, count(*) AS n FROM retention.operations WHERE policy = %s GROUP BY 1",
        (policy.name,),
    ).fetchall()
    assert [(r["state"], r["n"]) for r in states] == [("done", 12)], "none stuck, none lost"
    server = sandbox.state.stats()
    assert len(server["effects"]) == 12
    assert set(server["effects"].values()) == {1}, "one remote effect per object"
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 0  # noqa: S608
    if boundary != "after claiming":
        assert server["repeats"] == 1, "the re-driven call reused its idempotency key"


def test_a_window_killed_in_the_middle_of_a_batch_deletes_every_row_once(
    db, unique_name, test_dsn
) -> None:
    from retention.rows import deleter

    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 101)])
    policy = make_policy(unique_name, window_rows=1000, batch_rows=30)
    (window,) = plan(db, policy)
    real_query = deleter.query
    batches = {"n": 0}

    def batch_then_die() -> None:
        def query(name: str, **identifiers: Any) -> Any:
            if name == "window_batch_done":
                batches["n"] += 1
                if batches["n"] == 2:  # inside the second batch's open transaction
                    die()
            return real_query(name, **identifiers)

        deleter.query = query  # type: ignore[assignment]
        with connect_dsn(test_dsn) as conn:
            delete_window(conn, policy, window, batch_rows=30, dry_run=False)

    assert in_child(batch_then_die) == -signal.SIGKILL
    left = count(db, f"SELECT count(*) FROM public.{unique_name}")  # noqa: S608
    assert left == 70, "the first batch committed; the second died with its transaction"
    with connect_dsn(test_dsn) as conn:
        again = delete_window(conn, policy, window, batch_rows=30, dry_run=False)
    assert again.rows_deleted == 70
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 0  # noqa: S608
    ledger = db.execute(
        "SELECT rows_deleted, state FROM retention.windows WHERE window_key = %s",
        (window.window_key,),
    ).fetchone()
    assert ledger == {"rows_deleted": 100, "state": "done"}, "each row counted once"
    assert request(policy).cutoff == window.cutoff


def test_a_deliverer_killed_after_the_post_gives_one_logical_event(
    db, unique_name, sandbox, test_dsn
) -> None:
    receiver = Receiver(new_secret()).start()
    try:
        policy = remote_policy(unique_name, notify={"http_conn_id": "x", "endpoint": "/e"})
        create_media_table(db, unique_name, 4)
        enqueue_all(db, policy)
        with connect_dsn(test_dsn) as conn:
            work_operations(conn, OperationsKind(policy, plain_sender(sandbox.url, 2)))
        url, secret = receiver.url, receiver.secret

        def deliver_then_die() -> None:
            killed_after(EventsKind, "send")
            with connect_dsn(test_dsn) as conn:
                deliver_events(
                    conn, policy.name, policy.notify, plain_sender(url, 2), Signer(secret, "x")
                )

        assert in_child(deliver_then_die) == -signal.SIGKILL
        assert len(receiver.received) == 1, "the POST arrived; its record did not"
        expire(db, "outbox", policy.name)
        with connect_dsn(test_dsn) as conn:
            stats = deliver_events(
                conn, policy.name, policy.notify, plain_sender(url, 2), Signer(secret, "x")
            )
        assert stats.done == 4
        states = db.execute(
            "SELECT state, count(*) AS n FROM retention.outbox WHERE policy = %s GROUP BY 1",
            (policy.name,),
        ).fetchall()
        assert [(r["state"], r["n"]) for r in states] == [("delivered", 4)]
        assert len(receiver.received) == 5, "one event was sent twice"
        assert len(receiver.events) == 4, "one logical event per confirmed deletion"
    finally:
        receiver.shutdown()
        receiver.server_close()
