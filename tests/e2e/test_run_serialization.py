"""Whole DAG runs (dag.test) around the run lease, the XComs they write and honest summaries."""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.models.dagbag import DagBag
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from airflow.utils.state import DagRunState

from devtools.seed import seed_event_logs
from retention.db.connection import Connection
from tests.support.env import ROOT
from tests.support.policies import policy_fields
from tests.support.xcoms import xcoms_per_task

pytestmark = pytest.mark.e2e

D = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(
    days=2
)


@pytest.fixture
def policy_dag(
    db: Connection, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """public.<unique_name> seeded (3000 rows, 2000 eligible) and its DAG, polling every 1 s."""
    seed_event_logs(db, table=f"public.{unique_name}", rows=3_000, end=D, days=90, tenants=2)
    policies = tmp_path / "policies.yaml"
    fields = policy_fields(unique_name, window_rows=700, batch_rows=300, max_batch_rows=300)
    policies.write_text(yaml.safe_dump({"policies": {unique_name: fields}}))
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    monkeypatch.setenv("RETENTION_RUN_LEASE_POKE_SECONDS", "1")
    monkeypatch.setenv("RETENTION_RUN_LEASE_WAIT_SECONDS", "90")  # a bug fails, never hangs
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.dags[f"retention__{unique_name}"]


def summary_of(db: Connection, policy: str, run_id: str) -> dict[str, Any]:
    row = db.execute(
        "SELECT * FROM retention.runs WHERE policy = %s AND run_id = %s", (policy, run_id)
    ).fetchone()
    assert row is not None
    return row


def lease_of(db: Connection, policy: str) -> dict[str, Any]:
    row = db.execute("SELECT * FROM retention.run_leases WHERE policy = %s", (policy,)).fetchone()
    assert row is not None
    return row


def reschedules_of(dag_id: str) -> int:
    """How often ``take_run_lease`` of the DAG was rescheduled (told to wait)."""
    from airflow.models.taskreschedule import TaskReschedule

    with create_session() as session:
        return (
            session.query(TaskReschedule)
            .join(TaskInstance, TaskReschedule.ti_id == TaskInstance.id)
            .filter(TaskInstance.dag_id == dag_id, TaskInstance.task_id == "take_run_lease")
            .count()
        )


def set_run_state(dag_id: str, run_id: str, state: DagRunState) -> None:
    with create_session() as session:
        session.query(DagRun).filter(DagRun.dag_id == dag_id, DagRun.run_id == run_id).update(
            {DagRun.state: state}, synchronize_session=False
        )


def test_a_run_writes_one_xcom_per_task_and_gives_the_lease_back(
    policy_dag: Any, db: Connection, unique_name: str
) -> None:
    run = policy_dag.test(logical_date=D)
    assert run.state == "success"
    xcoms = xcoms_per_task(policy_dag.dag_id, run.run_id)
    assert xcoms, "the tasks' results are kept"
    assert max(xcoms.values()) == 1, f"one XCom per task instance, not one per key: {xcoms}"
    windows = summary_of(db, unique_name, run.run_id)["windows"]
    assert sum(1 for task, _ in xcoms if task == "delete_window") == windows >= 2
    lease = lease_of(db, unique_name)
    assert (lease["run_id"], lease["last_run_id"], lease["last_outcome"]) == (
        None,
        run.run_id,
        "released",
    )


def test_a_second_run_waits_for_the_running_holder_then_goes_on(
    policy_dag: Any, db: Connection, unique_name: str
) -> None:
    first = policy_dag.test(logical_date=D)
    assert first.state == "success"
    # The first run "still running", holding the lease: what an overlapping backfill sees.
    db.execute(
        "UPDATE retention.run_leases SET run_id = %s WHERE policy = %s",
        (first.run_id, unique_name),
    )
    set_run_state(policy_dag.dag_id, first.run_id, DagRunState.RUNNING)
    finished: list[dt.datetime] = []

    def finish_first_once_the_second_waits() -> None:
        """Let the first run end only after the second has been told to wait, twice."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and reschedules_of(policy_dag.dag_id) < 2:
            time.sleep(0.2)
        finished.append(dt.datetime.now(dt.UTC))
        set_run_state(policy_dag.dag_id, first.run_id, DagRunState.SUCCESS)

    releaser = threading.Thread(target=finish_first_once_the_second_waits)
    releaser.start()
    second = policy_dag.test(logical_date=D + dt.timedelta(days=1))
    releaser.join()
    assert second.state == "success"
    assert reschedules_of(policy_dag.dag_id) >= 2, "take_run_lease rescheduled while it waited"
    with create_session() as session:
        work_started = min(
            ti.start_date
            for ti in session.query(TaskInstance).filter(
                TaskInstance.dag_id == policy_dag.dag_id,
                TaskInstance.run_id == second.run_id,
                TaskInstance.task_id.in_(["plan_windows", "drop_partitions"]),
            )
        )
    assert work_started >= finished[0], "nothing of the second run ran before the first ended"
    summary = summary_of(db, unique_name, second.run_id)["summary"]
    assert summary["other_runs"] == [], "nothing of another run worked during this one"
    lease = lease_of(db, unique_name)
    assert (lease["run_id"], lease["last_run_id"]) == (None, second.run_id)


def test_a_lease_held_by_a_run_that_no_longer_exists_is_taken_over(
    policy_dag: Any, db: Connection, unique_name: str
) -> None:
    db.execute(
        "INSERT INTO retention.run_leases (policy, dag_id, run_id, taken_at) "
        "VALUES (%s, %s, 'deleted-run', now())",
        (unique_name, policy_dag.dag_id),
    )
    run = policy_dag.test(logical_date=D)
    assert run.state == "success"
    assert summary_of(db, unique_name, run.run_id)["status"] == "clean"
    with create_session() as session:
        lease_xcom = (
            session.query(XComModel)
            .filter(
                XComModel.dag_id == policy_dag.dag_id,
                XComModel.run_id == run.run_id,
                XComModel.task_id == "take_run_lease",
            )
            .one()
        )
    assert lease_xcom.value["took_over"] == "deleted-run"
    assert lease_of(db, unique_name)["last_run_id"] == run.run_id


def test_a_dry_run_says_so_and_lists_no_dirty_windows(
    policy_dag: Any, db: Connection, unique_name: str
) -> None:
    run = policy_dag.test(logical_date=D, run_conf={"dry_run": True})
    assert run.state == "success"
    row = summary_of(db, unique_name, run.run_id)
    summary: dict[str, Any] = row["summary"]
    assert row["status"] == "dry_run"
    assert summary["run_kind"].startswith("dry run")
    assert summary["rows_remaining"] == summary["rows_counted"] > 0
    assert summary["dirty_windows"] == [], "a dry run's untouched windows are not dirt"
    with create_session() as session:
        labels = [
            ti.rendered_map_index
            for ti in session.query(TaskInstance).filter(
                TaskInstance.dag_id == policy_dag.dag_id,
                TaskInstance.run_id == run.run_id,
                TaskInstance.task_id == "delete_window",
            )
        ]
    assert labels
    assert all(label.startswith("dry run · ids ") for label in labels), labels
    # dag.test() keeps the last run_conf in the DAG object's params: say "real" explicitly.
    real = policy_dag.test(logical_date=D + dt.timedelta(days=1), run_conf={"dry_run": False})
    assert summary_of(db, unique_name, real.run_id)["summary"]["run_kind"] == "deletion"
