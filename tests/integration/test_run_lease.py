"""The run lease: one run of a policy at a time, and what an ended run left open is closed."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from retention.db.connection import Connection, connect_dsn
from retention.db.sqlfiles import query
from retention.runs.lease import Turn, holds_run_lease, release_run_lease, take_run_lease
from tests.support.policies import make_policy
from tests.support.tables import create_table, old, plan


def states(**runs: str | None):
    """Airflow's answer for each run id (missing: the run does not exist)."""
    asked: list[str] = []

    def run_state(run_id: str) -> str | None:
        asked.append(run_id)
        return runs.get(run_id)

    run_state.asked = asked  # type: ignore[attr-defined]
    return run_state


def lease_row(db: Connection, policy: str) -> dict:
    row = db.execute("SELECT * FROM retention.run_leases WHERE policy = %s", (policy,)).fetchone()
    assert row is not None
    return row


def test_a_free_lease_is_taken_and_a_running_holder_keeps_it(
    db: Connection, unique_name: str
) -> None:
    first = take_run_lease(db, unique_name, "retention__x", "run-A", states())
    assert first.taken
    assert first.took_over is None
    again = take_run_lease(db, unique_name, "retention__x", "run-A", states())
    assert again.taken, "a later task of the holding run goes on"

    waiting = take_run_lease(
        db, unique_name, "retention__x", "run-B", states(**{"run-A": "running"})
    )
    assert not waiting.taken
    assert (waiting.holder, waiting.holder_state) == ("run-A", "running")
    message = waiting.message(unique_name)
    assert "run-A holds the run lease" in message
    assert "run-B waits" in message
    assert lease_row(db, unique_name)["run_id"] == "run-A"
    assert holds_run_lease(db, unique_name, "run-B") == "run-A"
    assert holds_run_lease(db, unique_name, "run-A") is None


def test_only_the_holder_gives_the_lease_back(db: Connection, unique_name: str) -> None:
    take_run_lease(db, unique_name, "retention__x", "run-A", states())
    assert not release_run_lease(db, unique_name, "run-B")
    assert lease_row(db, unique_name)["run_id"] == "run-A"
    assert release_run_lease(db, unique_name, "run-A")
    row = lease_row(db, unique_name)
    assert (row["run_id"], row["last_run_id"], row["last_outcome"]) == (
        None,
        "run-A",
        "released",
    )
    after = take_run_lease(db, unique_name, "retention__x", "run-B", states())
    assert after.taken
    assert after.took_over is None


@pytest.mark.parametrize("holder_state", ["failed", "success", None])
def test_a_run_that_ended_without_reconcile_is_taken_over_and_closed(
    db: Connection, unique_name: str, holder_state: str | None
) -> None:
    create_table(db, unique_name, [(i, 1, old(i)) for i in range(1, 41)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5, window_per_tenant=False)
    windows = plan(db, policy, run_id="run-A")
    assert len(windows) >= 2
    take_run_lease(db, unique_name, policy.dag_id, "run-A", states())
    db.execute(query("window_start"), {"window_key": windows[0].window_key})  # then killed
    db.execute(
        "UPDATE retention.windows SET rows_deleted = 7 WHERE window_key = %s",
        (windows[0].window_key,),
    )

    ended = states(**({"run-A": holder_state} if holder_state else {}))
    settling = take_run_lease(db, unique_name, policy.dag_id, "run-B", ended)
    assert not settling.taken, "its window's task may still be inside Airflow's SIGTERM grace"
    assert settling.stopping_windows == 1
    assert "1 of its windows may still be stopping" in settling.message(unique_name)
    outcome = take_run_lease(db, unique_name, policy.dag_id, "run-B", ended, grace_seconds=0)

    assert outcome.taken
    assert outcome.took_over == "run-A"
    assert outcome.closed_windows == [windows[0].window_key]
    window = db.execute(
        "SELECT state, last_error FROM retention.windows WHERE window_key = %s",
        (windows[0].window_key,),
    ).fetchone()
    assert window is not None
    assert window["state"] == "cancelled"
    assert "run-B" in window["last_error"]
    run = db.execute(
        "SELECT status, rows_deleted, summary FROM retention.runs WHERE policy = %s "
        "AND run_id = 'run-A'",
        (unique_name,),
    ).fetchone()
    assert run is not None
    assert run["status"] == "cancelled"
    assert run["rows_deleted"] == 7
    assert run["summary"]["partial"] is True
    assert run["summary"]["windows_by_state"] == {
        "cancelled": 1,
        "planned": len(windows) - 1,
    }
    row = lease_row(db, unique_name)
    assert (row["run_id"], row["last_run_id"], row["last_outcome"]) == (
        "run-B",
        "run-A",
        "taken_over",
    )


def test_a_reconciled_run_keeps_its_summary_when_closed_later(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(i, 1, old(i)) for i in range(1, 11)])
    policy = make_policy(unique_name, window_rows=100, window_per_tenant=False)
    plan(db, policy, run_id="run-A")
    db.execute(
        "UPDATE retention.runs SET status = 'clean', summary = '{\"status\": \"clean\"}' "
        "WHERE policy = %s AND run_id = 'run-A'",
        (unique_name,),
    )
    take_run_lease(db, unique_name, policy.dag_id, "run-A", states())
    take_run_lease(db, unique_name, policy.dag_id, "run-B", states(**{"run-A": "failed"}))
    run = db.execute(
        "SELECT status, summary FROM retention.runs WHERE policy = %s AND run_id = 'run-A'",
        (unique_name,),
    ).fetchone()
    assert run is not None
    assert (run["status"], run["summary"]) == ("clean", {"status": "clean"})


def test_a_holder_running_again_gets_the_full_grace_when_it_ends_again(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(i, 1, old(i)) for i in range(1, 21)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5, window_per_tenant=False)
    windows = plan(db, policy, run_id="run-A")
    take_run_lease(db, unique_name, policy.dag_id, "run-A", states())
    db.execute(query("window_start"), {"window_key": windows[0].window_key})
    ended = states(**{"run-A": "failed"})
    assert not take_run_lease(db, unique_name, policy.dag_id, "run-B", ended).taken
    db.execute(  # seen ended long ago …
        "UPDATE retention.run_leases SET holder_ended_at = now() - interval '1 hour' "
        "WHERE policy = %s",
        (unique_name,),
    )
    cleared = states(**{"run-A": "running"})  # … but its tasks were cleared: it runs again
    assert not take_run_lease(db, unique_name, policy.dag_id, "run-B", cleared).taken
    assert lease_row(db, unique_name)["holder_ended_at"] is None
    again = take_run_lease(db, unique_name, policy.dag_id, "run-B", ended)
    assert not again.taken, "its new end gets the full grace, not the old timestamp's"


def test_reconciling_a_run_that_never_planned_names_the_lease_holder(
    db: Connection, unique_name: str
) -> None:
    from retention.evidence.reconcile import RunNotPlanned, reconcile_run

    policy = make_policy(unique_name)
    take_run_lease(db, unique_name, policy.dag_id, "run-A", states())
    with pytest.raises(RunNotPlanned, match="Run run-A holds the policy's run lease"):
        reconcile_run(db, policy, "run-B")


def test_a_run_is_cancelled_only_once_none_of_its_windows_still_runs(
    db: Connection, unique_name: str
) -> None:
    """One task marked failed leaves a working run 'planned' (with the partial figures);
    the run turns 'cancelled' when its last running window stops."""
    from retention.runs.lease import record_stopped_run

    create_table(db, unique_name, [(i, 1, old(i)) for i in range(1, 21)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5, window_per_tenant=False)
    first, second = plan(db, policy, run_id="run-A")[:2]
    for window in (first, second):
        db.execute(query("window_start"), {"window_key": window.window_key})

    def stop(window_key: str) -> dict:
        db.execute(
            "UPDATE retention.windows SET state = 'cancelled' WHERE window_key = %s",
            (window_key,),
        )
        record_stopped_run(db, unique_name, "run-A", "SIGTERM")
        row = db.execute(
            "SELECT status, finished_at, summary FROM retention.runs "
            "WHERE policy = %s AND run_id = 'run-A'",
            (unique_name,),
        ).fetchone()
        assert row is not None
        return row

    one = stop(first.window_key)
    assert (one["status"], one["finished_at"]) == ("planned", None), "the run still works"
    assert one["summary"]["partial"] is True
    assert one["summary"]["windows_by_state"]["running"] == 1
    both = stop(second.window_key)
    assert both["status"] == "cancelled"
    assert both["finished_at"] is not None
    assert both["summary"]["status"] == "cancelled"


def test_a_stop_that_waited_for_another_counts_what_that_one_left(
    db: Connection, unique_name: str, test_dsn: str
) -> None:
    """Two stops of one run at once: the earlier one closes the last running window and
    records while holding the run's row; the later one waits for that row, then counts
    the windows as the earlier one left them (cancelled, finished, both windows counted),
    not as they were before it waited (a window 'running', finished_at NULL)."""
    from retention.runs.lease import record_stopped_run

    create_table(db, unique_name, [(i, 1, old(i)) for i in range(1, 21)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5, window_per_tenant=False)
    first, second = plan(db, policy, run_id="run-A")[:2]
    db.execute(query("window_start"), {"window_key": second.window_key})
    db.execute(  # the later stop's own window, closed before it records
        "UPDATE retention.windows SET state = 'cancelled' WHERE window_key = %s",
        (first.window_key,),
    )
    recorded: list[bool] = []
    with connect_dsn(test_dsn) as earlier, connect_dsn(test_dsn) as later:
        later_stop = threading.Thread(
            target=lambda: recorded.append(record_stopped_run(later, unique_name, "run-A", "b"))
        )
        with earlier.transaction():  # as a lease take closes a stale window, then records
            earlier.execute(
                "UPDATE retention.windows SET state = 'cancelled' WHERE window_key = %s",
                (second.window_key,),
            )
            assert record_stopped_run(earlier, unique_name, "run-A", "a")
            later_stop.start()
            deadline = time.monotonic() + 10
            while not db.execute(
                "SELECT wait_event_type = 'Lock' AS waits FROM pg_stat_activity WHERE pid = %s",
                (later.info.backend_pid,),
            ).fetchone()["waits"]:
                assert time.monotonic() < deadline, "the later stop never waited for the row"
                time.sleep(0.05)
        later_stop.join(timeout=10)
    assert recorded == [True]
    row = db.execute(
        "SELECT status, finished_at, summary FROM retention.runs "
        "WHERE policy = %s AND run_id = 'run-A'",
        (unique_name,),
    ).fetchone()
    assert (row["status"], row["summary"]["status"]) == ("cancelled", "cancelled")
    assert row["finished_at"] is not None, "no window runs: the run is finished"
    assert row["summary"]["windows_by_state"] == {"cancelled": 2}
    assert row["summary"]["reason"] == "b"


DAY = dt.timedelta(days=1)
NOV_25 = dt.datetime(2026, 11, 25, tzinfo=dt.UTC)


def turn(logical_date: dt.datetime, retain_days: int = 30) -> Turn:
    return Turn(logical_date - dt.timedelta(days=retain_days), logical_date)


def look(db: Connection, policy: str, run_id: str, when: dt.datetime, run_state, **kw):
    """One poke of ``run_id``'s take_run_lease sensor (a waiter with its turn)."""
    return take_run_lease(
        db, policy, f"retention__{policy}", run_id, run_state, turn=turn(when), waits=True, **kw
    )


def test_waiting_runs_take_the_free_lease_oldest_logical_date_first(
    db: Connection, unique_name: str
) -> None:
    """A backfill's runs looked in the order 11-27, 11-28, 11-26, 11-25 and used to take the
    lease in that order; the older dates' summaries then read "deleted 0"."""
    dates = {f"run-{d:%m-%d}": d for d in (NOV_25 + n * DAY for n in (2, 3, 1, 0))}
    running = states(holder="running", **dict.fromkeys(dates, "running"))
    take_run_lease(db, unique_name, f"retention__{unique_name}", "holder", running)
    for run_id, date in dates.items():  # each looks while the holder works: all wait
        assert not look(db, unique_name, run_id, date, running).taken
    assert release_run_lease(db, unique_name, "holder")

    order = []
    while len(order) < len(dates):
        for run_id, date in dates.items():  # they keep looking in the same order
            if run_id in order:
                continue
            outcome = look(db, unique_name, run_id, date, running)
            if outcome.taken:
                order.append(run_id)
                assert release_run_lease(db, unique_name, run_id)
            else:
                assert outcome.ahead is not None
                assert "waits for it and goes first" in outcome.message(unique_name)
    assert order == ["run-11-25", "run-11-26", "run-11-27", "run-11-28"]
    left = db.execute(
        "SELECT count(*) AS n FROM retention.run_lease_waiters WHERE policy = %s", (unique_name,)
    ).fetchone()
    assert left == {"n": 0}, "a run that took the lease no longer waits"


def test_a_waiter_that_stopped_looking_or_whose_run_ended_is_passed_over(
    db: Connection, unique_name: str
) -> None:
    running = states(**{"run-early": "running", "run-late": "running"})
    take_run_lease(db, unique_name, f"retention__{unique_name}", "holder", states())
    assert not look(db, unique_name, "run-early", NOV_25, states(holder="running")).taken
    release_run_lease(db, unique_name, "holder")
    later = NOV_25 + 3 * DAY

    held_up = look(db, unique_name, "run-late", later, running)
    assert not held_up.taken
    assert held_up.ahead is not None
    assert held_up.ahead.named == "run run-early (logical date 2026-11-25)"
    db.execute(  # run-early's sensor stopped looking (marked success by hand, say)
        "UPDATE retention.run_lease_waiters SET last_seen = now() - interval '2 minutes' "
        "WHERE policy = %s AND run_id = 'run-early'",
        (unique_name,),
    )
    assert look(db, unique_name, "run-late", later, running, stale_seconds=60).taken

    assert not look(db, unique_name, "run-early", NOV_25, running).taken  # looks again
    release_run_lease(db, unique_name, "run-late")
    ended = states(**{"run-early": "failed", "run-next": "running"})
    assert look(db, unique_name, "run-next", later + DAY, ended).taken, (
        "a waiter whose DAG run was marked failed holds nobody up"
    )
    waiting = db.execute(
        "SELECT run_id FROM retention.run_lease_waiters WHERE policy = %s", (unique_name,)
    ).fetchall()
    assert waiting == [], "the ended waiter is forgotten"


def test_a_free_lease_waits_for_an_earlier_run_that_has_not_looked_yet(
    db: Connection, unique_name: str
) -> None:
    """A backfill starts its runs together: the first to look must not take the free lease
    for that alone while a run of an earlier date (Airflow knows it runs) has not looked."""
    running = states(**{"run-11-27": "running", "run-11-25": "running", "run-11-28": "running"})
    first = look(db, unique_name, "run-11-27", NOV_25 + 2 * DAY, running, earlier="run-11-25")
    assert not first.taken
    assert first.coming == "run-11-25"
    assert "run run-11-25 of an earlier logical date is running and has not looked for it" in (
        first.message(unique_name)
    )
    assert look(db, unique_name, "run-11-25", NOV_25, running).taken, "it looks: it goes first"
    release_run_lease(db, unique_name, "run-11-25")
    assert look(db, unique_name, "run-11-27", NOV_25 + 2 * DAY, running).taken
    release_run_lease(db, unique_name, "run-11-27")

    stuck = {"earlier": "run-stuck", "stale_seconds": 60}  # never looks (stuck before it)
    assert not look(db, unique_name, "run-11-28", NOV_25 + 3 * DAY, running, **stuck).taken
    db.execute(
        "UPDATE retention.run_lease_waiters SET first_seen = now() - interval '2 minutes' "
        "WHERE policy = %s AND run_id = 'run-11-28'",
        (unique_name,),
    )
    assert look(db, unique_name, "run-11-28", NOV_25 + 3 * DAY, running, **stuck).taken, (
        "an earlier run that does not come holds the lease up for a few pokes at most"
    )


def test_a_cleared_window_of_a_later_run_yields_to_an_earlier_waiter(
    db: Connection, unique_name: str
) -> None:
    running = states(**{"run-11-25": "running"})
    take_run_lease(db, unique_name, f"retention__{unique_name}", "holder", states())
    assert not look(db, unique_name, "run-11-25", NOV_25, states(holder="running")).taken
    release_run_lease(db, unique_name, "holder")
    dag_id = f"retention__{unique_name}"
    later = take_run_lease(
        db, unique_name, dag_id, "run-12-01", running, turn=turn(NOV_25 + 6 * DAY)
    )
    assert not later.taken
    assert later.ahead is not None
    assert later.ahead.run_id == "run-11-25"
    unknown = take_run_lease(db, unique_name, dag_id, "run-x", running)  # no turn: goes last
    assert not unknown.taken
    older = take_run_lease(
        db, unique_name, dag_id, "run-11-01", running, turn=turn(NOV_25 - 24 * DAY)
    )
    assert older.taken, "a cleared window of an older date goes before the waiter"


def test_airflow_is_asked_about_runs_without_holding_the_lease_row(
    db: Connection, test_dsn: str, unique_name: str
) -> None:
    """Asking Airflow for a run's state is a network call that can be slow: while it is
    asked, other pollers of the policy must not queue behind the lease row's lock."""
    take_run_lease(db, unique_name, "retention__x", "run-A", states())
    waiter_turn = Turn(cutoff=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), logical_date=None)
    take_run_lease(
        db,
        unique_name,
        "retention__x",
        "run-W",
        states(**{"run-A": "running"}),
        turn=waiter_turn,
        waits=True,
    )
    lockable: list[tuple[str, bool]] = []

    def run_state(run_id: str) -> str | None:
        with connect_dsn(test_dsn) as other:
            got = other.execute(
                "SELECT count(*) AS rows FROM (SELECT 1 FROM retention.run_leases "
                "WHERE policy = %s FOR UPDATE SKIP LOCKED) AS lease",
                (unique_name,),
            ).fetchone()
            assert got is not None
            lockable.append((run_id, got["rows"] == 1))
        return {"run-A": "running", "run-W": "running"}.get(run_id)

    later = Turn(cutoff=dt.datetime(2026, 2, 1, tzinfo=dt.UTC), logical_date=None)
    outcome = take_run_lease(
        db, unique_name, "retention__x", "run-B", run_state, turn=later, waits=True
    )
    assert (outcome.taken, outcome.holder) == (False, "run-A")
    release_run_lease(db, unique_name, "run-A")  # now the waiter ahead is what Airflow is asked
    outcome = take_run_lease(
        db, unique_name, "retention__x", "run-B", run_state, turn=later, waits=True
    )
    assert not outcome.taken
    assert outcome.ahead is not None
    assert outcome.ahead.run_id == "run-W"
    assert [run for run, _ in lockable] == ["run-A", "run-W"]
    assert all(free for _, free in lockable), f"lease row locked while asking: {lockable}"
