"""Lock warnings name the session that holds the lock: a real blocking transaction."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from devtools.plans import request
from retention.db.connection import Connection, connect_dsn
from retention.db.gate import Gate
from retention.db.health import describe_lock_waiters
from retention.rows.deleter import WindowDeleteError, delete_window
from retention.rows.locks import describe_holders, lock_holders
from retention.rows.partitions import PartitionDropError
from retention.rows.planner import plan_windows
from tests.integration.test_partitions import MONTHS, fast_path, partitioned
from tests.support.policies import make_policy, remote_policy
from tests.support.remote import enqueue_all
from tests.support.remote import work as work_pass
from tests.support.tables import create_media_table, create_table, ids_left, old

DELETER_LOG = "retention.rows.deleter"


def lock_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == DELETER_LOG and r.levelno == logging.WARNING
    ]


def test_a_row_lock_warning_names_the_blocking_pid(
    db: Connection, unique_name: str, test_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention")
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 41)])
    policy = make_policy(
        unique_name,
        window_rows=100,
        batch_rows=16,
        lock_timeout_ms=100,
        health={"busy_sleep_ratio": 0},
    )
    (window,) = plan_windows(db, request(policy))
    blocker = psycopg.connect(test_dsn, application_name="report_job")
    blocker.execute(f"SELECT 1 FROM public.{unique_name} WHERE id = 25 FOR UPDATE")  # noqa: S608
    pid = blocker.info.backend_pid

    def release_on_first_sleep(_: float) -> None:
        blocker.rollback()

    try:
        result = delete_window(
            db, policy, window, batch_rows=16, dry_run=False, sleep=release_on_first_sleep
        )
    finally:
        blocker.close()
    assert result.rows_deleted == 40
    warnings = lock_warnings(caplog)
    assert len(warnings) == result.timeouts >= 5
    first = warnings[0]
    assert re.match(
        rf"{re.escape(window.label)}: batch of \d+ keys after 16 hit lock_timeout \(100 ms\)", first
    )
    assert f"on public.{unique_name}" in first
    assert f"held by pid {pid} (report_job, idle in transaction for " in first
    assert "holds 1 row lock (key 25)" in first
    assert "FOR UPDATE" in first, "what the holder last ran"
    assert all(f"pid {pid}" in w for w in warnings), warnings


def test_a_table_lock_warning_names_the_blocking_pid(
    db: Connection, unique_name: str, test_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention")
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 11)])
    policy = make_policy(unique_name, window_rows=100, batch_rows=4, lock_timeout_ms=100)
    (window,) = plan_windows(db, request(policy))
    blocker = psycopg.connect(test_dsn, application_name="migration")
    blocker.execute(f"LOCK TABLE public.{unique_name} IN ACCESS EXCLUSIVE MODE")
    pid = blocker.info.backend_pid
    try:
        delete_window(
            db, policy, window, batch_rows=4, dry_run=False, sleep=lambda _: blocker.rollback()
        )
    finally:
        blocker.close()
    assert ids_left(db, unique_name) == []
    (first, *_) = lock_warnings(caplog)
    assert f"held by pid {pid} (migration, " in first
    assert "holds table lock AccessExclusiveLock" in first


def test_a_row_that_stays_locked_is_skipped_naming_its_holder(
    db: Connection, unique_name: str, test_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention")
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 11)])
    policy = make_policy(unique_name, window_rows=100, batch_rows=4, lock_timeout_ms=50)
    (window,) = plan_windows(db, request(policy))
    with psycopg.connect(test_dsn) as blocker:
        blocker.execute(f"UPDATE public.{unique_name} SET payload = 'y' WHERE id = 6")  # noqa: S608
        pid = blocker.info.backend_pid
        with pytest.raises(WindowDeleteError, match=r"keys \[6\]"):
            delete_window(db, policy, window, batch_rows=4, dry_run=False, sleep=lambda _: None)
    skipped = [w for w in lock_warnings(caplog) if "skipping it" in w]
    assert len(skipped) == 1
    assert skipped[0].startswith(f"{window.label}: row 6 timed out 5 times even alone")
    assert f"held by pid {pid} " in skipped[0]


def test_no_holder_found_is_said_plainly(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 11)])
    policy = make_policy(unique_name, window_rows=100)
    (window,) = plan_windows(db, request(policy))
    holders = lock_holders(db, policy.table_spec, window, window.first_id - 1, 10)
    assert holders == []
    assert describe_holders(holders).startswith("no session holds them any more")


def test_a_health_pause_on_blocked_sessions_names_who_waits_on_which_pid(
    db: Connection, unique_name: str, test_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention.db.gate")
    create_table(db, unique_name, [(1, 1, old())])
    policy = make_policy(unique_name)
    with (
        connect_dsn(test_dsn) as holder,
        psycopg.connect(test_dsn, autocommit=True, application_name="billing") as victim,
    ):
        holder_pid, victim_pid = holder.info.backend_pid, victim.info.backend_pid
        holder.execute("BEGIN")
        holder.execute(f"SELECT 1 FROM public.{unique_name} WHERE id = 1 FOR UPDATE")  # noqa: S608
        waiter = threading.Thread(
            target=lambda: victim.execute(
                f"UPDATE public.{unique_name} SET payload = 'z' WHERE id = 1"  # noqa: S608
            ),
            daemon=True,
        )
        waiter.start()
        try:
            wait_for(lambda: describe_lock_waiters(db), "the other session to wait on the lock")
            gate = Gate(policy.name, policy.health, policy.table_spec, label="ids 1–1")
            assert gate.wait(db, until=gate.clock()) is False, "paused, and out of time"
        finally:
            holder.execute("ROLLBACK")
            waiter.join(30)
    (paused,) = [r.getMessage() for r in caplog.records if "paused:" in r.getMessage()]
    assert paused.startswith("ids 1–1: paused: 1 session(s) wait on locks held by retention")
    assert f"pid {victim_pid} (billing, waiting " in paused
    assert f"UPDATE public.{unique_name} SET payload" in paused  # noqa: S608
    assert paused.endswith(f"on retention pid {holder_pid}")


def wait_for(condition: Callable[[], Any], what: str, deadline: float = 30.0) -> Any:
    """Poll ``condition`` until it is truthy (or fail after ``deadline`` seconds)."""
    ends = time.monotonic() + deadline
    while time.monotonic() < ends:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize(("default", "mode"), [(False, "SHARE"), (True, "ACCESS SHARE")])
def test_a_partition_detach_that_hits_lock_timeout_names_the_holder(
    db: Connection, test_dsn: str, unique_name: str, default: bool, mode: str
) -> None:
    partitioned(db, unique_name, MONTHS, default=default)
    policy = make_policy(unique_name, lock_timeout_ms=200)
    with psycopg.connect(test_dsn, autocommit=True, application_name="reporting") as holder:
        holder.execute("BEGIN")
        holder.execute(
            sql.SQL("LOCK TABLE {} IN {} MODE").format(
                sql.Identifier("public", unique_name), sql.SQL(mode)
            )
        )
        pid = holder.info.backend_pid
        with pytest.raises(PartitionDropError) as failed:
            fast_path(db, policy)
        holder.execute("ROLLBACK")
    message = str(failed.value)
    assert f"another session holds a lock on public.{unique_name} (held by pid {pid} " in message
    assert "(reporting, idle in transaction for " in message
    assert "Nothing was detached" in message


def test_a_remote_local_delete_that_hits_lock_timeout_names_the_holder(
    db: Connection, unique_name: str, sandbox, test_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    create_media_table(db, unique_name, 3)
    policy = remote_policy(unique_name).model_copy(update={"lock_timeout_ms": 100})
    enqueue_all(db, policy)
    with psycopg.connect(test_dsn, application_name="exporter") as blocker:
        blocker.execute(f"SELECT 1 FROM public.{unique_name} WHERE id = 2 FOR UPDATE")  # noqa: S608
        pid = blocker.info.backend_pid
        with caplog.at_level(logging.WARNING, logger="retention"):
            work_pass(test_dsn, policy, sandbox)
    (warning,) = [r.getMessage() for r in caplog.records if "local delete" in r.getMessage()]
    assert warning.startswith("row 2: local delete failed for now, retried later after the API")
    assert f"held by pid {pid} (exporter, idle in transaction for " in warning
    assert "holds 1 row lock (key 2)" in warning


def test_rows_locked_together_share_one_holder_lookup(
    db: Connection, unique_name: str, sandbox, test_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each lookup costs a lock wait: the second locked row of a batch reuses the first's."""
    create_media_table(db, unique_name, 4)
    policy = remote_policy(unique_name).model_copy(update={"lock_timeout_ms": 100})
    enqueue_all(db, policy)
    with psycopg.connect(test_dsn, application_name="exporter") as blocker:
        blocker.execute(f"SELECT 1 FROM public.{unique_name} WHERE id IN (2, 3) FOR UPDATE")  # noqa: S608
        pid = blocker.info.backend_pid
        with caplog.at_level(logging.WARNING, logger="retention"):
            work_pass(test_dsn, policy, sandbox)
    warnings = [r.getMessage() for r in caplog.records if "local delete" in r.getMessage()]
    assert [w.split(":")[0] for w in warnings] == ["row 2", "row 3"]
    assert f"held by pid {pid} (exporter" in warnings[0]
    assert "; as looked up for row 2 0 s ago: " in warnings[1]
    assert f"held by pid {pid} (exporter" in warnings[1]
