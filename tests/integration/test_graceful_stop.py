"""A real SIGTERM stops a window between batches or calls, within seconds, and leaves
a ledger that says so: the window ``cancelled``, the run a partial summary, the
operations never called pending again with no lease held."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from psycopg import sql

from devtools.sandbox_api import SandboxServer
from retention.db.connection import Connection, connect_dsn
from retention.objects.deleter import ObjectDeleter
from retention.objects.kind import OperationsKind
from retention.rows.deleter import RowDeleter
from retention.stopping import StopRequested, graceful_stop, stop_requested
from tests.support.policies import make_policy, remote_policy
from tests.support.remote import sandbox_sender
from tests.support.tables import create_media_table, create_table, ids_left, old, plan


@pytest.fixture(autouse=True)
def default_sigterm() -> Iterator[None]:
    """Each test starts with SIGTERM's default action, whatever ran before it in this process:
    an in-process ``dag.test()`` (the e2e tier's, which a parallel run may put first) leaves
    the Airflow task runner's handler installed, and these tests send a real SIGTERM."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


@contextmanager
def sigterm_when(condition: Callable[[], bool], timeout: float = 30.0) -> Iterator[list[float]]:
    """Send this process a real SIGTERM once ``condition()`` holds; yields [sent_at]."""
    sent: list[float] = []
    done = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not done.is_set() and time.monotonic() < deadline:
            if condition():
                sent.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield sent
    finally:
        done.set()
        watcher.join(5)


def window_row(db: Connection, window_key: str) -> dict:
    row = db.execute(
        "SELECT * FROM retention.windows WHERE window_key = %s", (window_key,)
    ).fetchone()
    assert row is not None
    return row


def run_row(db: Connection, policy: str, run_id: str) -> dict:
    row = db.execute(
        "SELECT * FROM retention.runs WHERE policy = %s AND run_id = %s", (policy, run_id)
    ).fetchone()
    assert row is not None
    return row


def test_sigterm_cancels_a_row_window_waiting_on_a_lock_within_seconds(
    db: Connection, unique_name: str, test_dsn: str
) -> None:
    create_table(db, unique_name, [(i, 1, old(i)) for i in range(1, 201)])
    policy = make_policy(
        unique_name,
        window_rows=1_000,
        batch_rows=10,
        min_batch_rows=1,
        max_batch_rows=10,
        lock_timeout_ms=300,
        window_per_tenant=False,
    )
    (window,) = plan(db, policy, run_id="run-stop")
    deleter = RowDeleter(policy.table_spec, policy.timeouts, policy.batch_timing, policy.health)
    with connect_dsn(test_dsn) as blocker, connect_dsn(test_dsn) as watcher:
        blocker.autocommit = False  # holds row 120 until the test ends: batches past it time out
        blocker.execute(
            sql.SQL("SELECT 1 FROM {} WHERE id = 120 FOR UPDATE").format(
                sql.Identifier("public", unique_name)
            )
        )

        def stuck_at_the_lock() -> bool:  # every row before the locked one is gone
            return window_row(watcher, window.window_key)["rows_deleted"] >= 119

        began = time.monotonic()
        with (
            sigterm_when(stuck_at_the_lock) as sent,
            graceful_stop(),
            pytest.raises(StopRequested, match="stopped on request"),
        ):
            deleter.run(db, window, batch_rows=10, dry_run=False)
        stopped = time.monotonic()
        blocker.rollback()
    assert sent, "the window finished before the signal: nothing was tested"
    assert stopped - sent[0] < 3.0, "a stop must not wait out the lock backoff"
    assert stopped - began < 20
    row = window_row(db, window.window_key)
    assert row["state"] == "cancelled"
    assert "StopRequested" in row["last_error"]
    assert len(ids_left(db, unique_name)) == 200 - row["rows_deleted"] == 81, "kept for a rerun"
    run = run_row(db, unique_name, "run-stop")
    assert run["status"] == "cancelled"
    assert run["rows_deleted"] == row["rows_deleted"]
    assert run["summary"]["partial"] is True
    assert run["summary"]["windows_by_state"] == {"cancelled": 1}
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "the handler is restored"


def test_a_batch_still_waiting_3_s_after_the_sigterm_is_cancelled(
    db: Connection, unique_name: str, test_dsn: str
) -> None:
    """A batch stuck behind a lock far longer than Airflow's 5 s grace (lock_timeout 60 s)
    is cancelled 3 s after the stop: the window ends cancelled, not killed, and the
    cancel is not counted as a timeout."""
    create_table(db, unique_name, [(i, 1, old(i)) for i in range(1, 51)])
    policy = make_policy(
        unique_name,
        window_rows=1_000,
        batch_rows=10,
        min_batch_rows=10,
        max_batch_rows=10,
        lock_timeout_ms=60_000,
        statement_timeout_ms=120_000,
        window_per_tenant=False,
    )
    (window,) = plan(db, policy, run_id="run-stuck")
    deleter = RowDeleter(policy.table_spec, policy.timeouts, policy.batch_timing, policy.health)
    with connect_dsn(test_dsn) as blocker, connect_dsn(test_dsn) as watcher:
        blocker.autocommit = False
        blocker.execute(
            sql.SQL("SELECT 1 FROM {} WHERE id = 25 FOR UPDATE").format(
                sql.Identifier("public", unique_name)
            )
        )
        holder = blocker.info.backend_pid

        def waiting_on_the_lock() -> bool:
            row = watcher.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (holder,),
            ).fetchone()
            return bool(row and row["n"])

        with (
            sigterm_when(waiting_on_the_lock) as sent,
            graceful_stop(db),
            pytest.raises(StopRequested),
        ):
            deleter.run(db, window, batch_rows=10, dry_run=False)
        stopped = time.monotonic()
        blocker.rollback()
    assert sent, "the batch never waited on the lock: nothing was tested"
    assert stopped - sent[0] < 5.0, "cancelled before Airflow's SIGKILL (5 s)"
    row = window_row(db, window.window_key)
    assert (row["state"], row["timeouts"], row["rows_deleted"]) == ("cancelled", 0, 20)
    assert run_row(db, unique_name, "run-stuck")["status"] == "cancelled"


def test_sigterm_stops_a_remote_window_after_the_call_in_flight(
    db: Connection, unique_name: str
) -> None:
    create_media_table(db, unique_name, 40)
    policy = remote_policy(unique_name, claim_batch=40, rate_per_second=1000, burst=100)
    (window,) = plan(db, policy, run_id="run-stop")
    server = SandboxServer(0, latency_ms=100).start()
    try:
        deleter = ObjectDeleter(
            policy.table_spec,
            policy.timeouts,
            policy=policy,
            open_kind=lambda: OperationsKind(policy, sandbox_sender(server)),
        )
        with (
            sigterm_when(lambda: len(server.state.stats()["requests"]) >= 3) as sent,
            graceful_stop(),
            pytest.raises(StopRequested, match="released unstarted"),
        ):
            deleter.run(db, window, batch_rows=100, dry_run=False)
        stopped = time.monotonic()
        calls_made = len(server.state.stats()["requests"])
    finally:
        server.stop()
    assert sent
    assert stopped - sent[0] < 2.0
    assert 3 <= calls_made <= 4, "at most the call in flight when the signal came"
    by_state = {
        r["state"]: (r["n"], r["leased"])
        for r in db.execute(
            "SELECT state, count(*) AS n, count(lease_owner) AS leased "
            "FROM retention.operations WHERE window_key = %s GROUP BY state",
            (window.window_key,),
        )
    }
    assert by_state["done"][0] == calls_made
    assert by_state["pending"] == (40 - calls_made, 0), "unstarted leases released"
    assert "in_flight" not in by_state
    assert window_row(db, window.window_key)["state"] == "cancelled"
    assert run_row(db, unique_name, "run-stop")["status"] == "cancelled"


def test_graceful_stop_chains_the_old_handler_and_restores_it() -> None:
    """Airflow's own SIGTERM handler (on_kill) still runs; after the block it is back."""
    seen: list[int] = []

    def airflow_handler(signum: int, frame: object) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGTERM, airflow_handler)
    try:
        with graceful_stop():
            assert not stop_requested()
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop_requested()
        assert seen == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is airflow_handler
        assert not stop_requested(), "the next task starts afresh"
    finally:
        signal.signal(signal.SIGTERM, previous)
