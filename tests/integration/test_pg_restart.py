"""The database restarts (or crashes) in the middle of a run: the task fails with a clear
message or finishes, and the next run completes with nothing lost and nothing done twice."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from devtools.airflow_services import wait_for
from retention.db.connection import connect_dsn
from retention.db.migrate import migrate
from retention.objects.deleter import work_operations
from retention.objects.kind import OperationsKind
from retention.queue.http import plain_sender
from retention.rows.deleter import delete_window
from tests.support.pg_cluster import ScratchCluster
from tests.support.policies import make_policy, remote_policy
from tests.support.remote import enqueue_all
from tests.support.tables import count, create_media_table, create_table, old, plan


@pytest.fixture
def cluster() -> Iterator[ScratchCluster]:
    # Not under pytest's tmp dir: as root, the server runs as `postgres`, which must reach it.
    base = Path(tempfile.mkdtemp(prefix="retention-pg-"))
    try:
        try:
            server = ScratchCluster(base).start()
        except FileNotFoundError as missing:
            pytest.skip(str(missing))
        try:
            with connect_dsn(server.dsn) as conn:
                migrate(conn)
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def wait_until(cluster: ScratchCluster, progress: str) -> None:
    """Poll (with a deadline) until the running work has made some progress, so the restart
    lands in the middle of it however busy the machine is."""

    def started() -> bool:
        with connect_dsn(cluster.dsn) as conn:
            return conn.execute(progress).fetchone()["n"] > 0  # type: ignore[index]

    wait_for(started, 60, "the work making progress", step=0.05)


def run_in_thread(target) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            target()
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    return thread, errors


def test_a_restart_during_a_window_fails_it_clearly_and_a_retry_finishes(cluster) -> None:
    name = "t_restart_rows"
    with connect_dsn(cluster.dsn) as conn:
        create_table(conn, name, [(i, 1, old()) for i in range(1, 200_001)])
        policy = make_policy(name, window_rows=1_000_000, batch_rows=500)
        (window,) = plan(conn, policy)

    def delete() -> None:
        with connect_dsn(cluster.dsn) as conn:
            delete_window(conn, policy, window, batch_rows=500, dry_run=False)

    thread, errors = run_in_thread(delete)
    wait_until(cluster, "SELECT coalesce(sum(rows_deleted), 0) AS n FROM retention.windows")
    cluster.restart("fast")
    thread.join(60)
    assert len(errors) == 1
    assert isinstance(errors[0], psycopg.OperationalError), errors
    with connect_dsn(cluster.dsn) as conn:
        left_after_crash = count(conn, f"SELECT count(*) FROM public.{name}")  # noqa: S608
        assert 0 < left_after_crash < 200_000, "the restart came in the middle of the window"
        again = delete_window(conn, policy, window, batch_rows=500, dry_run=False)
        assert again.rows_deleted == left_after_crash
        assert count(conn, f"SELECT count(*) FROM public.{name}") == 0  # noqa: S608
        ledger = conn.execute(
            "SELECT rows_deleted, state FROM retention.windows WHERE window_key = %s",
            (window.window_key,),
        ).fetchone()
    assert ledger == {"rows_deleted": 200_000, "state": "done"}, "every row counted once"


def test_a_crash_during_a_remote_pass_repeats_no_effect(cluster, sandbox) -> None:
    name = "t_restart_remote"
    sandbox.state.configure(latency_ms=20)
    with connect_dsn(cluster.dsn) as conn:
        create_media_table(conn, name, 120)
        policy = remote_policy(name)
        enqueue_all(conn, policy)

    def work() -> None:
        with connect_dsn(cluster.dsn) as conn:
            work_operations(conn, OperationsKind(policy, plain_sender(sandbox.url, 2)))

    thread, errors = run_in_thread(work)
    wait_until(cluster, "SELECT count(*) AS n FROM retention.operations WHERE state = 'done'")
    cluster.restart("immediate")  # a crash: asynchronous commits of the last moment are lost
    thread.join(60)
    assert errors, "the pass lost its connection"
    with connect_dsn(cluster.dsn) as conn:
        conn.execute(
            "UPDATE retention.operations SET lease_expires_at = now() WHERE state = 'in_flight'"
        )
        conn.execute("UPDATE retention.rate_limiters SET closed_until = now()")
        work_operations(conn, OperationsKind(policy, plain_sender(sandbox.url, 2)))
        states = conn.execute(
            "SELECT state, count(*) AS n FROM retention.operations GROUP BY 1"
        ).fetchall()
        left = count(conn, f"SELECT count(*) FROM public.{name}")  # noqa: S608
    assert [(r["state"], r["n"]) for r in states] == [("done", 120)]
    assert left == 0
    effects = sandbox.state.stats()["effects"]
    assert len(effects) == 120
    assert set(effects.values()) == {1}, "re-driven calls reused their keys: one effect each"
