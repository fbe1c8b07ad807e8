"""Health pauses and the pause switch under real conditions in the real Postgres.

Each test makes the condition for real (an old transaction in another session,
a session waiting on a lock a retention session holds, a throttled VACUUM on
the table, the switch naming the policy), runs a window in a thread, waits
until the deleter says it paused, checks that nothing was deleted meanwhile,
clears the condition, and checks that the window then finishes and records
the pause.  Every wait polls a condition with a deadline; none sleeps a
guessed time.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from devtools.plans import request
from retention.db.connection import Connection, connect_dsn
from retention.db.gate import Gate, PausedTooLong
from retention.db.health import judge, read_health
from retention.db.migrate import migrate
from retention.objects.deleter import work_operations
from retention.objects.enqueue import enqueue_window
from retention.objects.kind import OperationsKind
from retention.policy.model import HealthSpec
from retention.rows.deleter import RowDeleter, delete_window
from retention.rows.planner import plan_windows
from retention.rows.windows import Window
from tests.support.pg_cluster import ScratchCluster
from tests.support.policies import make_policy, remote_policy
from tests.support.remote import sandbox_sender
from tests.support.tables import create_media_table, create_table, ids_left, old

DEADLINE = 30.0


def until(condition: Callable[[], Any], what: str) -> Any:
    """Poll ``condition`` until it is truthy (or fail after DEADLINE seconds)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Background:
    """Runs one window in a thread on its own connection; keeps its result or error."""

    def __init__(self, dsn: str, run: Callable[[Connection], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

        def work() -> None:
            try:
                with connect_dsn(dsn) as conn:
                    self.result = run(conn)
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=work, daemon=True)
        self.thread.start()

    def join(self) -> Any:
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "the window did not finish"
        if self.error is not None:
            raise self.error
        return self.result


def paused_with(caplog: pytest.LogCaptureFixture, words: str) -> bool:
    return any(words in r.getMessage() for r in caplog.records if r.name == "retention.db.gate")


def ledger(db: Connection, window: Window) -> dict[str, Any]:
    row = db.execute(
        "SELECT state, rows_deleted, pauses, paused_seconds, pause_reasons, last_error "
        "FROM retention.windows WHERE window_key = %s",
        (window.window_key,),
    ).fetchone()
    assert row is not None
    return row


@contextmanager
def other_session(
    dsn: str, application_name: str = "someone_else", **kwargs: Any
) -> Iterator[psycopg.Connection[Any]]:
    """A plain session that is not ours (no ``retention`` application name)."""
    conn = psycopg.connect(dsn, autocommit=True, application_name=application_name, **kwargs)
    try:
        yield conn
    finally:
        conn.close()


def one_window(db: Connection, name: str, rows: int = 300, **health: Any):
    """One window of ``rows`` old rows. The other sessions these tests open are clients at
    work, so pacing is off unless a test asks for it: each test sees only its own pause."""
    health.setdefault("busy_sleep_ratio", 0)
    create_table(db, name, [(i, 1, old(i)) for i in range(1, rows + 1)])
    policy = make_policy(name, window_rows=100_000, batch_rows=50, health=health)
    (window,) = plan_windows(db, request(policy))
    return policy, window


def test_an_old_transaction_elsewhere_pauses_the_deleter_until_it_ends(
    db: Connection, test_dsn: str, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention.db.gate")
    policy, window = one_window(db, unique_name, max_xact_age_seconds=0.5)
    with other_session(test_dsn) as other:
        other.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        other.execute("SELECT count(*) FROM pg_class")  # holds a snapshot: backend_xmin
        pid = other.info.backend_pid
        until(
            lambda: db.execute(
                "SELECT clock_timestamp() - xact_start > interval '0.6 s' AS old "
                "FROM pg_stat_activity WHERE pid = %s",
                (pid,),
            ).fetchone()["old"],
            "the other transaction to be older than the limit",
        )
        run = Background(
            test_dsn, lambda c: delete_window(c, policy, window, batch_rows=50, dry_run=False)
        )
        until(lambda: paused_with(caplog, f"transaction {pid} open for"), "the pause")
        assert len(ids_left(db, unique_name)) == 300, "nothing deleted while paused"
        other.execute("COMMIT")
        result = run.join()
    assert result.rows_deleted == 300
    row = ledger(db, window)
    assert (row["state"], row["pauses"]) == ("done", 1)
    assert set(row["pause_reasons"]) == {"xact_age"}
    assert row["paused_seconds"] > 0
    assert result.as_dict()["pause"]["pauses"] == 1


def test_a_session_waiting_on_a_lock_a_retention_session_holds_pauses_the_deleter(
    db: Connection, test_dsn: str, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention.db.gate")
    policy, window = one_window(db, unique_name)
    db.execute(f"CREATE TABLE public.{unique_name}_other (id int PRIMARY KEY, n int)")
    db.execute(f"INSERT INTO public.{unique_name}_other VALUES (1, 0)")  # noqa: S608
    with connect_dsn(test_dsn) as holder, other_session(test_dsn) as victim:
        holder.execute("BEGIN")
        holder.execute(f"SELECT * FROM public.{unique_name}_other WHERE id = 1 FOR UPDATE")  # noqa: S608
        waiter = threading.Thread(
            target=lambda: victim.execute(
                f"UPDATE public.{unique_name}_other SET n = n + 1 WHERE id = 1"  # noqa: S608
            ),
            daemon=True,
        )
        waiter.start()
        until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = "
                "'someone_else' AND wait_event_type = 'Lock'"
            ).fetchone()["n"],
            "the other session to wait on the lock",
        )
        run = Background(
            test_dsn, lambda c: delete_window(c, policy, window, batch_rows=50, dry_run=False)
        )
        until(
            lambda: paused_with(caplog, "1 session(s) wait on locks held by retention sessions"),
            "the pause",
        )
        assert len(ids_left(db, unique_name)) == 300
        holder.execute("COMMIT")
        waiter.join(DEADLINE)
        result = run.join()
    assert result.rows_deleted == 300
    assert set(ledger(db, window)["pause_reasons"]) == {"blocked_sessions"}


def test_a_vacuum_on_the_table_pauses_the_deleter_when_asked(
    db: Connection, test_dsn: str, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention.db.gate")
    policy, window = one_window(db, unique_name, rows=3000, pause_on_autovacuum=True)
    db.execute(f"DELETE FROM public.{unique_name} WHERE id > 2900")  # dead rows to vacuum  # noqa: S608
    with other_session(test_dsn) as vacuumer:
        # Autovacuum cannot be started on demand; a VACUUM throttled to a crawl is the same
        # entry in pg_stat_progress_vacuum, which is what the check reads.
        vacuumer.execute("SET vacuum_cost_delay = 100")
        vacuumer.execute("SET vacuum_cost_limit = 1")
        pid = vacuumer.info.backend_pid
        slow = threading.Thread(
            target=lambda: _vacuum_until_cancelled(vacuumer, unique_name), daemon=True
        )
        slow.start()
        until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pg_stat_progress_vacuum WHERE pid = %s", (pid,)
            ).fetchone()["n"],
            "the VACUUM to start",
        )
        run = Background(
            test_dsn, lambda c: delete_window(c, policy, window, batch_rows=50, dry_run=False)
        )
        until(lambda: paused_with(caplog, f"a vacuum (pid {pid}) is working on"), "the pause")
        assert len(ids_left(db, unique_name)) == 2900
        db.execute("SELECT pg_cancel_backend(%s)", (pid,))
        slow.join(DEADLINE)
        result = run.join()
    assert result.rows_deleted == 2900
    assert set(ledger(db, window)["pause_reasons"]) == {"autovacuum"}


def _vacuum_until_cancelled(conn: psycopg.Connection[Any], name: str) -> None:
    with suppress(psycopg.errors.QueryCanceled):
        conn.execute(f"VACUUM public.{name}")


def test_the_pause_switch_stops_deleting_and_clearing_it_lets_the_window_finish(
    db: Connection, test_dsn: str, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention.db.gate")
    policy, window = one_window(db, unique_name)
    switch = {"value": f"other_policy, {unique_name}"}
    run = Background(
        test_dsn,
        lambda c: delete_window(
            c, policy, window, batch_rows=50, dry_run=False, switch=lambda: switch["value"]
        ),
    )
    until(lambda: paused_with(caplog, "paused by retention_pause"), "the pause")
    assert len(ids_left(db, unique_name)) == 300
    switch["value"] = "other_policy"
    result = run.join()
    assert result.rows_deleted == 300
    assert set(ledger(db, window)["pause_reasons"]) == {"retention_pause"}


def test_a_switch_left_on_fails_the_window_after_max_pause_and_a_retry_resumes(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(i, 1, old(i)) for i in range(1, 301)])
    policy = make_policy(
        unique_name,
        window_rows=100_000,
        batch_rows=50,
        max_batch_rows=50,
        health={"max_pause_seconds": 0.3},
    )
    (window,) = plan_windows(db, request(policy))
    calls = {"n": 0}

    def switch_on_after_two_batches() -> str:
        calls["n"] += 1
        return "all" if calls["n"] > 2 else ""

    class LooksBeforeEveryBatch(RowDeleter):  # so the switch is seen mid-window
        def gate_for(self, window: Window) -> Gate:
            gate = super().gate_for(window)
            gate.check_every = 0.0
            return gate

    deleter = LooksBeforeEveryBatch(
        policy.table_spec,
        policy.timeouts,
        policy.batch_timing,
        policy.health,
        switch_on_after_two_batches,
    )
    with pytest.raises(PausedTooLong, match=r"paused 0\.3 s: the Variable retention_pause"):
        deleter.run(db, window, batch_rows=50, dry_run=False)
    left = len(ids_left(db, unique_name))
    assert 0 < left < 300, "it stopped mid-window, after the batches before the switch"
    failed = ledger(db, window)
    assert failed["state"] == "failed"
    assert "retention_pause" in failed["last_error"]
    assert set(failed["pause_reasons"]) == {"retention_pause"}
    result = delete_window(db, policy, window, batch_rows=50, dry_run=False, switch=lambda: "")
    assert result.rows_deleted == left
    assert ids_left(db, unique_name) == []


def test_a_paused_remote_pass_makes_no_call_and_leaves_everything_pending(
    db: Connection, unique_name: str, sandbox: Any
) -> None:
    create_media_table(db, unique_name, 20)
    policy = remote_policy(unique_name)
    (window,) = plan_windows(db, request(policy))
    enqueue_window(db, policy, window, 100)
    gate = Gate(policy.name, policy.health, policy.table_spec, lambda: "all")
    stats = work_operations(
        db, OperationsKind(policy, sandbox_sender(sandbox)), budget_seconds=1.0, gate=gate
    )
    assert stats.stopped == "paused"
    assert stats.claimed == 0
    assert sandbox.state.stats()["requests"] == []
    pending = db.execute(
        "SELECT count(*) AS n FROM retention.operations WHERE policy = %s AND state = 'pending'",
        (unique_name,),
    ).fetchone()
    assert pending == {"n": 20}
    assert gate.totals()["pause_reasons"] == {"retention_pause": pytest.approx(1.0, abs=0.5)}


@pytest.fixture
def primary_and_standby() -> Iterator[tuple[ScratchCluster, ScratchCluster]]:
    """A scratch primary and a streaming standby of it (skipped without server binaries)."""
    # Not under pytest's tmp dir: as root, the servers run as `postgres`, which must reach them.
    bases = [Path(tempfile.mkdtemp(prefix=f"retention-{role}-")) for role in ("p", "s")]
    started: list[ScratchCluster] = []
    try:
        try:
            primary = ScratchCluster(bases[0]).start()
            started.append(primary)
            standby = ScratchCluster(bases[1]).start_standby_of(primary)
            started.append(standby)
        except FileNotFoundError as missing:
            pytest.skip(str(missing))
        with connect_dsn(primary.dsn) as conn:
            migrate(conn)
        yield primary, standby
    finally:
        for server in reversed(started):
            server.stop()
        for base in bases:
            shutil.rmtree(base, ignore_errors=True)


def test_replica_lag_from_a_real_standby_pauses_the_deleter_until_it_catches_up(
    primary_and_standby: tuple[ScratchCluster, ScratchCluster], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention.db.gate")
    primary, standby = primary_and_standby
    name = "t_replica_lag"
    with connect_dsn(primary.dsn) as conn, connect_dsn(standby.dsn) as replica:
        create_table(conn, name, [(i, 1, old(i)) for i in range(1, 301)])
        policy = make_policy(
            name, window_rows=100_000, batch_rows=50, health={"max_replica_lag_seconds": 0.5}
        )
        (window,) = plan_windows(conn, request(policy))
        replica.execute("SELECT pg_wal_replay_pause()")

        def lagging() -> bool:
            conn.execute("SELECT txid_current()")  # some WAL, so the standby reports back
            row = conn.execute(
                "SELECT max(extract(epoch FROM replay_lag)) AS lag FROM pg_stat_replication"
            ).fetchone()
            return bool(row and row["lag"] and row["lag"] > 1.0)

        until(lagging, "the standby to fall more than 1 s behind")
        run = Background(
            primary.dsn, lambda c: delete_window(c, policy, window, batch_rows=50, dry_run=False)
        )
        until(lambda: paused_with(caplog, "a standby replays"), "the pause")
        assert len(ids_left(conn, name)) == 300, "nothing deleted while the standby lags"
        replica.execute("SELECT pg_wal_replay_resume()")
        result = run.join()
        assert result.rows_deleted == 300
        assert set(ledger(conn, window)["pause_reasons"]) == {"replica_lag"}


def test_wal_bytes_behind_pause_and_a_disconnected_standby_is_missing_on_a_real_standby(
    primary_and_standby: tuple[ScratchCluster, ScratchCluster], caplog: pytest.LogCaptureFixture
) -> None:
    """replay_lag goes stale while replay is stalled and the standby's row goes when it
    disconnects; the WAL bytes behind and the count of connected standbys do not."""
    caplog.set_level(logging.INFO, logger="retention.db.gate")
    primary, standby = primary_and_standby
    name = "t_replica_bytes"
    with connect_dsn(primary.dsn) as conn, connect_dsn(standby.dsn) as replica:
        create_table(conn, name, [(i, 1, old(i)) for i in range(1, 301)])
        policy = make_policy(
            name,
            window_rows=100_000,
            batch_rows=50,
            health={
                "max_replica_lag_seconds": None,  # only the bytes decide here
                "abort_replica_lag_seconds": None,
                "max_replica_lag_bytes": 1024**2,
                "expected_standbys": 1,
            },
        )
        (window,) = plan_windows(conn, request(policy))
        until(lambda: read_health(conn, policy.table_spec).standbys == 1, "the standby counted")
        replica.execute("SELECT pg_wal_replay_pause()")
        conn.execute(  # about 4 MB of WAL the standby receives but does not replay
            "CREATE TABLE t_wal_filler AS SELECT repeat('x', 1000) AS x "
            "FROM generate_series(1, 4000)"
        )
        until(
            lambda: (read_health(conn, policy.table_spec).replica_lag_bytes or 0) > 1024**2,
            "the standby to replay more than 1 MiB behind",
        )
        run = Background(
            primary.dsn, lambda c: delete_window(c, policy, window, batch_rows=50, dry_run=False)
        )
        until(lambda: paused_with(caplog, "of WAL behind (limit 1.0 MiB)"), "the pause")
        assert len(ids_left(conn, name)) == 300, "nothing deleted while the standby lags"
        replica.execute("SELECT pg_wal_replay_resume()")
        result = run.join()
        assert result.rows_deleted == 300
        assert set(ledger(conn, window)["pause_reasons"]) == {"replica_lag"}

        standby.stop()  # disconnects: its row leaves pg_stat_replication
        gone = until(
            lambda: (r := read_health(conn, policy.table_spec)).standbys == 0 and r,
            "the standby's walsender to go",
        )
        assert (gone.replica_lag_seconds, gone.replica_lag_bytes) == (None, None)
        assert judge(gone, HealthSpec(), name).clear, "no lag reading sees a missing standby"
        missing = judge(gone, policy.health, name)
        assert (missing.kind, missing.reason) == (
            "standby_missing",
            "standby missing: 0 of 1 expected standby(s) connected",
        )


def test_an_expected_standby_that_is_not_connected_pauses_and_none_expected_does_not(
    db: Connection, unique_name: str
) -> None:
    """The test server has no standby (pg_stat_replication is empty)."""
    policy, window = one_window(db, unique_name, expected_standbys=1, max_pause_seconds=0.3)
    assert read_health(db, policy.table_spec).standbys == 0, "the test server has no standby"
    with pytest.raises(PausedTooLong, match=r"standby missing: 0 of 1 expected standby\(s\)"):
        delete_window(db, policy, window, batch_rows=50, dry_run=False)
    assert len(ids_left(db, unique_name)) == 300, "nothing deleted while a standby is missing"
    assert set(ledger(db, window)["pause_reasons"]) == {"standby_missing"}

    policy, window = one_window(db, f"{unique_name}_n", expected_standbys=0)
    assert delete_window(db, policy, window, batch_rows=50, dry_run=False).rows_deleted == 300


def test_the_oldest_transaction_is_an_idle_writer_here_not_a_reader_elsewhere(
    db: Connection, test_dsn: str, unique_name: str
) -> None:
    create_table(db, unique_name, [(1, 1, old())])
    table = make_policy(unique_name).table_spec
    elsewhere_dsn = make_conninfo(test_dsn, dbname="postgres")
    with other_session(elsewhere_dsn) as elsewhere, other_session(test_dsn) as writer:
        elsewhere.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        elsewhere.execute("SELECT count(*) FROM pg_class")  # a snapshot, in another database
        assert read_health(db, table).oldest_xact_pid != elsewhere.info.backend_pid
        writer.execute("BEGIN")
        writer.execute(f"UPDATE public.{unique_name} SET payload = 'y' WHERE id = 1")  # noqa: S608
        # now idle in transaction: no snapshot (backend_xmin NULL), but an xid
        reading = read_health(db, table)
        assert reading.oldest_xact_pid == writer.info.backend_pid
        assert reading.oldest_xact_seconds is not None
        writer.execute("ROLLBACK")
        elsewhere.execute("ROLLBACK")


class BusyClient:
    """Another application's session, running a small statement every 20 ms."""

    def __init__(self, dsn: str, application_name: str = "someone_else") -> None:
        self.stop = threading.Event()
        self.statements = 0

        def work() -> None:
            with other_session(dsn, application_name) as conn:
                while not self.stop.is_set():
                    conn.execute("SELECT 1")
                    self.statements += 1
                    self.stop.wait(0.02)

        self.thread = threading.Thread(target=work, daemon=True)
        self.thread.start()
        until(lambda: self.statements > 0, "the other client's first statement")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(DEADLINE)


def test_other_clients_at_work_are_seen_and_only_other_databases_or_ours_are_not(
    db: Connection, test_dsn: str, unique_name: str
) -> None:
    create_table(db, unique_name, [(1, 1, old())])
    table = make_policy(unique_name).table_spec
    until(  # sessions of earlier tests may take a moment to end
        lambda: read_health(db, table).active_clients == 0, "no other client at work"
    )
    with connect_dsn(test_dsn) as ours:  # another retention session, at work
        ours.execute("SELECT 1")
        assert read_health(db, table).active_clients == 0, "retention's own sessions"
    elsewhere = BusyClient(make_conninfo(test_dsn, dbname="postgres"))
    try:
        assert read_health(db, table).active_clients == 0, "a client of another database"
    finally:
        elsewhere.close()
    client = BusyClient(test_dsn)
    try:
        assert read_health(db, table).active_clients >= 1
    finally:
        client.close()


def test_the_window_paces_itself_while_another_client_works(
    db: Connection, test_dsn: str, unique_name: str
) -> None:
    policy, window = one_window(db, unique_name, busy_sleep_ratio=2.0)
    client = BusyClient(test_dsn)
    try:
        busy = delete_window(db, policy, window, batch_rows=50, dry_run=False)
    finally:
        client.close()
    assert busy.rows_deleted == 300
    assert busy.as_dict()["pause"]["paced_seconds"] > 0
    assert busy.as_dict()["pause"]["pauses"] == 0, "pacing is not a pause"
    row = ledger(db, window)
    assert set(row["pause_reasons"]) == {"paced"}, "the ledger keeps paced time apart"
    assert row["paused_seconds"] > 0, "and out of the window's working time"

    quiet_policy, quiet_window = one_window(db, f"{unique_name}_q", busy_sleep_ratio=2.0)
    until(
        lambda: read_health(db, quiet_policy.table_spec).active_clients == 0,
        "the other client's last statement to be over a second old",
    )
    quiet = delete_window(db, quiet_policy, quiet_window, batch_rows=50, dry_run=False)
    assert quiet.rows_deleted == 300
    assert "pause" not in quiet.as_dict(), "a quiet database: flat out"


def test_a_monitoring_agent_named_in_ignore_applications_does_not_pace_the_window(
    db: Connection, test_dsn: str, unique_name: str
) -> None:
    agent = BusyClient(test_dsn, application_name="pgwatch_agent")
    try:
        policy, window = one_window(
            db, unique_name, busy_sleep_ratio=2.0, ignore_applications=["pgwatch_agent"]
        )
        until(  # sessions of earlier tests may take a moment to end
            lambda: read_health(db, policy.table_spec).active_applications == {"pgwatch_agent": 1},
            "the agent alone at work",
        )
        quiet = delete_window(db, policy, window, batch_rows=50, dry_run=False)
        assert quiet.rows_deleted == 300
        assert "pause" not in quiet.as_dict(), "an ignored agent: flat out"

        fewer, few_window = one_window(db, f"{unique_name}_b", busy_sleep_ratio=2.0, busy_clients=2)
        one = delete_window(db, fewer, few_window, batch_rows=50, dry_run=False)
        assert "pause" not in one.as_dict(), "one client at work, two needed to pace"

        counted, counted_window = one_window(db, f"{unique_name}_c", busy_sleep_ratio=2.0)
        paced = delete_window(db, counted, counted_window, batch_rows=50, dry_run=False)
        assert paced.as_dict()["pause"]["paced_seconds"] > 0, "the same agent, counted: paced"
    finally:
        agent.close()


@pytest.fixture
def unprivileged_dsn(db: Connection, test_dsn: str, unique_name: str) -> Iterator[str]:
    """A login role of the test's own, without pg_monitor (dropped afterwards)."""
    role = sql.Identifier(unique_name)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
    try:
        yield make_conninfo(test_dsn, user=unique_name)
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(role))


def test_a_role_that_cannot_see_other_roles_sessions_says_so_once(
    db: Connection,
    test_dsn: str,
    unique_name: str,
    unprivileged_dsn: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without pg_monitor another role's busy session reads as quiet: the gate must say so,
    once per gate, with the grant that fixes it; a role that sees everything says nothing."""
    caplog.set_level(logging.INFO, logger="retention.db.gate")
    create_table(db, unique_name, [(1, 1, old())])
    policy = make_policy(unique_name)
    client = BusyClient(test_dsn)  # the superuser's session: hidden from the role
    try:
        with connect_dsn(unprivileged_dsn) as blind:
            gate = Gate(policy.name, policy.health, policy.table_spec, check_every=0.0)
            for _ in range(3):
                assert gate.wait(blind)
            blind_reading = read_health(blind, policy.table_spec)
        with_monitor = Gate(policy.name, policy.health, policy.table_spec, check_every=0.0)
        for _ in range(2):
            assert with_monitor.wait(db)
        seeing_reading = read_health(db, policy.table_spec)
    finally:
        client.close()
    blind_lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "retention.db.gate" and "cannot see" in r.getMessage()
    ]
    assert len(blind_lines) == 1, blind_lines
    assert blind_lines[0].startswith(f"policy {unique_name}: role {unique_name} cannot see")
    assert blind_lines[0].endswith(f"GRANT pg_monitor TO {unique_name}")
    assert blind_reading.active_clients == 0, "it cannot see the client at work"
    assert (blind_reading.sees_all_sessions, blind_reading.hidden_sessions > 0) == (False, True)
    assert seeing_reading.sees_all_sessions
    assert seeing_reading.active_clients >= 1
