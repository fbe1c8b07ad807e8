"""The deadline alert under Airflow's own processes: the scheduler notices the missed
deadline and the triggerer runs the callback, which tells ``on_deadline`` once. And the
policy's runs under the same scheduler: a run triggered for a date weeks ahead, which
Airflow never starts, holds no later run up, runs started together take the run
lease oldest date first, and a run of an older date started after them (a backfill)
says in its summary and its task log which run had deleted its rows.

A run is held back with the pause switch (``retention_pause``) until the alert
has arrived, so the test waits for events, never for a guessed duration.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devtools.airflow_services import (
    airflow_process,
    api_server,
    free_port,
    publish_policy,
    scheduler_environment,
    tail,
    task_log,
    trigger_run,
    wait_for,
    wait_for_run_end,
)
from devtools.receiver import Receiver
from retention.db.connection import Connection
from retention.db.gate import PAUSE_VARIABLE
from tests.support.policies import policy_fields
from tests.support.tables import create_table

pytestmark = pytest.mark.scheduler

CONN_ID = "ops_alerts"
RUN_SECONDS = 300
DEADLINE_MINUTES = 0.1  # 6 s after the run is queued; the run is held until the alert arrives
LEASE_POKE_SECONDS = "5"  # take_run_lease looks every 5 s (10 s in production)


@dataclass
class Services:
    logs: Path
    policies: Path
    receiver: Receiver


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory, test_dsn: str) -> Iterator[Services]:
    """api-server + dag-processor + scheduler + triggerer (LocalExecutor), and the receiver."""
    logs = tmp_path_factory.mktemp("alerts-scheduler")
    policies = logs / "policies.yaml"
    policies.write_text("policies: {}\n")
    with ExitStack() as stack:
        receiver = Receiver().start()
        stack.callback(receiver.server_close)
        stack.callback(receiver.shutdown)
        env = scheduler_environment(
            policies,
            logs,
            **{f"AIRFLOW_CONN_{CONN_ID.upper()}": receiver.connection()},
            AIRFLOW__CORE__EXECUTOR="LocalExecutor",
            AIRFLOW__API_AUTH__JWT_SECRET="retention-alerts-test-secret",
            # the triggerer's log server, on a port no other checkout's triggerer holds
            AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
            RETENTION_RUN_LEASE_POKE_SECONDS=LEASE_POKE_SECONDS,
        )
        url = stack.enter_context(api_server(env, logs, apps="execution"))
        env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"{url}/execution/"
        stack.enter_context(airflow_process("dag-processor", ["dag-processor"], env, logs))
        stack.enter_context(airflow_process("scheduler", ["scheduler"], env, logs))
        stack.enter_context(airflow_process("triggerer", ["triggerer"], env, logs))
        yield Services(logs, policies, receiver)


@pytest.fixture
def paused(unique_name: str) -> Iterator[str]:
    """The pause switch set for this test's policy (deleted afterwards, whatever happens)."""
    from airflow.models.variable import Variable

    Variable.set(PAUSE_VARIABLE, unique_name)
    yield unique_name
    Variable.delete(PAUSE_VARIABLE)


def triggerer_callbacks(policy: str) -> list[str | None]:
    """States of the triggerer callbacks (Airflow's ``callback`` table) of this policy."""
    from airflow.models.callback import Callback, CallbackType
    from airflow.utils.session import create_session

    with create_session() as session:
        callbacks = session.query(Callback).filter(Callback.type == CallbackType.TRIGGERER).all()
        return [
            c.state
            for c in callbacks
            if (c.data.get("kwargs") or {}).get("policy") == policy
            and c.data.get("path") == "retention.airflow.alerts.on_deadline_missed"
        ]


def test_the_triggerer_sends_the_deadline_alert_of_a_late_run_once(
    db: Connection, unique_name: str, services: Services, paused: str
) -> None:
    from airflow.models.variable import Variable

    logical_date = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(days=1)
    cutoff = logical_date - dt.timedelta(days=30)
    create_table(db, unique_name, [(i, 1, cutoff - dt.timedelta(days=1)) for i in range(1, 11)])
    fields = policy_fields(
        unique_name,
        window_rows=100,
        batch_rows=10,
        alerts={"on_deadline": CONN_ID, "deadline_minutes": DEADLINE_MINUTES},
    )
    dag_id = publish_policy(services.policies, services.logs, unique_name, fields)
    run_id = trigger_run(dag_id, logical_date)

    def mine() -> list[dict[str, Any]]:
        # The metadata database outlives a test session: a triggerer may finish callbacks
        # an earlier, interrupted session left behind, for policies of its own.
        return [r for r in services.receiver.received if r["json"].get("policy") == unique_name]

    with services.receiver.arrived:
        arrived = services.receiver.arrived.wait_for(mine, timeout=RUN_SECONDS)
    assert arrived, f"no deadline alert\n{tail(services.logs)}"
    Variable.delete(PAUSE_VARIABLE)  # let the held run finish

    state = wait_for_run_end(dag_id, run_id, RUN_SECONDS, services.logs)
    assert state == "success", tail(services.logs)
    [message] = mine()
    body = message["json"]
    assert (body["kind"], body["policy"], body["dag_id"], body["run_id"]) == (
        "deadline",
        unique_name,
        dag_id,
        run_id,
    )
    assert body["message"].startswith(
        f"{dag_id} run {run_id} has not finished 0.1 minutes after it was queued"
    )
    assert body["figures"]["state"] == "running"
    wait_for(  # the triggerer records the callback's end after the POST was answered
        lambda: triggerer_callbacks(unique_name) == ["success"],
        RUN_SECONDS,
        f"one triggerer callback succeeding: {triggerer_callbacks(unique_name)}",
        step=1,
    )
    ledger = db.execute(
        "SELECT kind, status, attempts FROM retention.alerts WHERE policy = %s", (unique_name,)
    ).fetchall()
    assert ledger == [{"kind": "deadline", "status": "sent", "attempts": 1}]


def task_states(dag_id: str, run_id: str) -> dict[str, str | None]:
    """Airflow's state of each task instance of the run (None: "No Status")."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state)
        rows = rows.filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        return {f"{task}[{index}]": state for task, index, state in rows}


def trigger_dated(dag_id: str, logical_date: dt.datetime) -> str:
    """Trigger a run whose data interval comes from its logical date, as the REST API and
    a backfill make it (``trigger_run`` infers it from the moment of the trigger)."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType

    with create_session() as session:
        run = trigger_dag(
            dag_id,
            triggered_by=DagRunTriggeredByType.TEST,
            logical_date=logical_date,
            run_after=logical_date,
            session=session,
        )
        assert run is not None
        return run.run_id


def run_state(dag_id: str, run_id: str) -> str | None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.query(DagRun.state).filter_by(dag_id=dag_id, run_id=run_id).scalar()


def mark_failed(dag_id: str, run_id: str) -> None:
    """What the fix says: mark the run failed (as the UI's "Mark Dag Run as… Failed")."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    with create_session() as session:
        session.query(DagRun).filter(DagRun.dag_id == dag_id, DagRun.run_id == run_id).update(
            {DagRun.state: DagRunState.FAILED}, synchronize_session=False
        )


def logged_summary(log: str, policy: str) -> dict[str, str]:
    """The rows (``name  value``) of the run summary a reconcile task logged, in order.
    A task log line is JSON (its message in ``event``) or, from an older writer, text."""
    messages = []
    for line in log.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = line
        messages.append(record.get("event", "") if isinstance(record, dict) else str(record))
    heading = f"policy {policy} run summary:\n"
    [text] = [m for m in messages if m.startswith(heading)]
    rows = [row.split(None, 1) for row in text.removeprefix(heading).splitlines()]
    return {row[0]: row[1] if len(row) > 1 else "" for row in rows}


def run_covered_backfill(
    db: Connection,
    services: Services,
    policy: str,
    logical_date: dt.datetime,
    covering_date: dt.datetime,
    covering_run: str,
) -> float:
    """Run the policy for ``logical_date`` after ``covering_run`` (a later date) has
    deleted everything older than its cutoff; check that its stored summary and its
    reconcile log name that run; return the seconds the run took."""
    dag_id = f"retention__{policy}"
    started = time.monotonic()
    run_id = trigger_dated(dag_id, logical_date)
    state = wait_for_run_end(dag_id, run_id, RUN_SECONDS, services.logs)
    assert state == "success", f"{run_id}\n{tail(services.logs)}"
    seconds = time.monotonic() - started
    covered = (
        f"nothing older than {logical_date - dt.timedelta(days=30):%Y-%m-%d} was left: "
        f"run {covering_date:%Y-%m-%d} deleted it"
    )
    [stored] = db.execute(
        "SELECT status, rows_deleted, summary FROM retention.runs "
        "WHERE policy = %s AND run_id = %s",
        (policy, run_id),
    ).fetchall()
    assert (stored["status"], stored["rows_deleted"]) == ("clean", 0)
    by = stored["summary"].get("covered_by")
    assert by is not None, f"the summary names no covering run: {stored['summary']}"
    assert (by["run_id"], by["note"]) == (covering_run, covered), by
    assert by["logical_date"] == covering_date.isoformat(), by
    rows = logged_summary(task_log(services.logs, dag_id, run_id, "reconcile"), policy)
    assert rows["rows_deleted"] == "0", rows
    # "deleted 0" does not stand alone: why, right after the run's first rows
    assert list(rows)[:5] == ["status", "dry_run", "policy", "run_id", "covered_by"], rows
    assert rows["covered_by"] == f"{covered} (run id {covering_run})", rows
    return seconds


def test_a_future_run_holds_nothing_up_and_runs_started_together_go_oldest_first(
    db: Connection, unique_name: str, services: Services
) -> None:
    """A run triggered for a date weeks ahead sits "running" with every task "No Status"
    (Airflow starts none before that date); with max_active_runs 1 every later run queued
    behind it. The two later runs are triggered newest first, as a backfill run backwards
    starts them, and look for the lease at about the same time: the older date takes it
    first, so each deletes its own rows and neither finds them gone. A third run, of a
    date older still, triggered once both have finished (a backfill over the days before
    them) finds nothing to delete, and its stored summary and its reconcile log say which
    run deleted it: the first of them to finish, named by its logical date."""
    from retention.airflow.access import AirflowAccess, FutureRun
    from retention.rows.cutoff import future_run_note

    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    newer, older = today - dt.timedelta(days=1), today - dt.timedelta(days=2)
    older_cutoff = older - dt.timedelta(days=30)
    rows = [(i, 1, older_cutoff - dt.timedelta(hours=1)) for i in range(1, 11)]  # both runs'
    rows += [(i, 1, older_cutoff + dt.timedelta(hours=1)) for i in range(11, 21)]  # newer's
    rows += [(i, 1, today - dt.timedelta(days=5)) for i in range(21, 31)]  # kept
    create_table(db, unique_name, rows)
    fields = policy_fields(unique_name, window_rows=100, batch_rows=10)
    dag_id = publish_policy(services.policies, services.logs, unique_name, fields)

    weeks_ahead = today + dt.timedelta(days=21)
    started = time.monotonic()
    future_run = trigger_run(dag_id, weeks_ahead)  # as the trigger form does it: due now
    try:
        wait_for(
            lambda: run_state(dag_id, future_run) == "running",
            RUN_SECONDS,
            f"Airflow setting {future_run} running\n{tail(services.logs)}",
        )
        newer_run = trigger_dated(dag_id, newer)
        older_run = trigger_dated(dag_id, older)
        for run_id in (newer_run, older_run):
            state = wait_for_run_end(dag_id, run_id, RUN_SECONDS, services.logs)
            assert state == "success", f"{run_id}\n{tail(services.logs)}"
        ran_for = time.monotonic() - started

        runs = {
            row["run_id"]: row
            for row in db.execute(
                "SELECT run_id, status, rows_deleted, planned_at, finished_at, summary "
                "FROM retention.runs WHERE policy = %s",
                (unique_name,),
            )
        }
        assert set(runs) == {newer_run, older_run}, "the future run never started a task"
        first, second = runs[older_run], runs[newer_run]
        assert first["finished_at"] <= second["planned_at"], "the older date went first"
        assert (first["status"], first["rows_deleted"]) == ("clean", 10)
        assert (second["status"], second["rows_deleted"]) == ("clean", 10)
        assert "covered_by" not in first["summary"], "nothing had deleted its rows before it"
        assert "covered_by" not in second["summary"], "it deleted rows of its own"

        backfill_seconds = run_covered_backfill(
            db, services, unique_name, today - dt.timedelta(days=3), older, older_run
        )

        states = task_states(dag_id, future_run)
        assert set(states.values()) <= {None}, f"Airflow started none of its tasks: {states}"
        now = dt.datetime.now(dt.UTC)
        [stuck] = AirflowAccess().future_runs([dag_id], now)
        assert stuck == FutureRun(dag_id, future_run, weeks_ahead, "running")
        note = future_run_note(stuck.run_id, stuck.logical_date, now)
        assert f"has the logical date {weeks_ahead:%Y-%m-%d} (21 days ahead)" in note
        assert f"Mark run {future_run} failed" in note
    finally:
        mark_failed(dag_id, future_run)  # the fix; and no run is left running for the next test
    print(
        f"two runs and a future one under the scheduler: {ran_for:.0f} s; "
        f"the covered backfill run: {backfill_seconds:.0f} s"
    )
