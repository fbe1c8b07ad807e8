"""The run lease: one run of a policy at a time, and what an ended run left open is closed."""

from __future__ import annotations

import pytest

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.runs.lease import holds_run_lease, release_run_lease, take_run_lease
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
