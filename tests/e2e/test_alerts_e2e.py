"""End to end: whole DAG runs with dag.test() sending alerts to a receiver on loopback."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.models.dagbag import DagBag
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from psycopg import sql

from devtools.receiver import Receiver
from retention.db.connection import Connection
from tests.support.env import ROOT
from tests.support.policies import policy_fields
from tests.support.tables import create_table

pytestmark = pytest.mark.e2e

# Relative to today, so the suite passes on any day (a cutoff in the future is refused).
D = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(
    days=2
)
CUTOFF = D - dt.timedelta(days=30)
CONN_ID = "ops_alerts"
BLOCKED_ID = 7
ALERTS = {
    "on_dirty": CONN_ID,
    "on_failure": CONN_ID,
    "on_dead_letters": CONN_ID,
    "on_deadline": CONN_ID,
    "deadline_minutes": 45,
}
# dag.test() of a run that succeeds with a deadline ends in an Airflow error (apache/airflow#73428:
# its in-memory scheduler DAG holds encoded alerts where DagRun.update_state expects ids), so
# the green run is tested without the deadline; the scheduler path is not affected.
WITHOUT_DEADLINE = {k: v for k, v in ALERTS.items() if k not in ("on_deadline", "deadline_minutes")}


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    server = Receiver().start()
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", server.connection())
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def load_dag(
    db: Connection, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Any]:
    """20 eligible and 10 kept rows in public.<unique_name>; its DAG loaded from dags/."""
    rows = [(i, 1, CUTOFF - dt.timedelta(days=1) if i <= 20 else D) for i in range(1, 31)]
    create_table(db, unique_name, rows)

    def load(**fields: Any) -> Any:
        policies = tmp_path / "policies.yaml"
        policy = policy_fields(unique_name, window_rows=10, batch_rows=5, **fields)
        policies.write_text(yaml.safe_dump({"policies": {unique_name: policy}}))
        monkeypatch.setenv("RETENTION_POLICIES", str(policies))
        bag = DagBag(dag_folder=str(ROOT / "dags"))
        assert bag.import_errors == {}
        return bag.dags[f"retention__{unique_name}"]

    return load


def block_deletes_of(db: Connection, table: str, key: int) -> None:
    """A BEFORE DELETE trigger that silently keeps one row: a blocker the run cannot see."""
    function = sql.Identifier(f"{table}_keep")
    db.execute(
        sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF OLD.id = {} THEN RETURN NULL; END IF; RETURN OLD; END $$"
        ).format(function, sql.Literal(key))
    )
    db.execute(
        sql.SQL(
            "CREATE TRIGGER keep BEFORE DELETE ON {} FOR EACH ROW EXECUTE FUNCTION {}()"
        ).format(sql.Identifier("public", table), function)
    )


def task_states(dag_id: str, run_id: str) -> dict[str, str | None]:
    with create_session() as session:
        return {
            ti.task_id: ti.state
            for ti in session.query(TaskInstance).filter(
                TaskInstance.dag_id == dag_id,
                TaskInstance.run_id == run_id,
                TaskInstance.map_index == -1,
            )
        }


def test_a_dirty_run_sends_one_on_dirty_message_and_stays_failed(
    db: Connection,
    unique_name: str,
    load_dag: Callable[..., Any],
    receiver: Receiver,
) -> None:
    block_deletes_of(db, unique_name, BLOCKED_ID)
    dag = load_dag(alerts=ALERTS)
    run = dag.test(logical_date=D)
    assert run.state == "failed", "a dirty run stays failed although send_alerts sent"
    states = task_states(dag.dag_id, run.run_id)
    assert (states["reconcile"], states["send_alerts"]) == ("failed", "failed")
    assert len(receiver.received) == 1, [r["json"] for r in receiver.received]
    body = receiver.received[0]["json"]
    assert (body["kind"], body["policy"], body["run_id"]) == ("dirty", unique_name, run.run_id)
    assert body["figures"]["rows_remaining"] == 1
    assert body["figures"]["rows_deleted"] == 19
    assert "Rows left in windows: ids 1–10: 1." in body["message"], "the window of the row kept"
    assert body["runbook"]["section"] == "A dirty run"
    sent = db.execute(
        "SELECT kind, status FROM retention.alerts WHERE policy = %s AND run_id = %s",
        (unique_name, run.run_id),
    ).fetchall()
    assert sent == [{"kind": "dirty", "status": "sent"}]


def test_a_clean_run_sends_nothing_and_stays_green(
    db: Connection,
    unique_name: str,
    load_dag: Callable[..., Any],
    receiver: Receiver,
) -> None:
    dag = load_dag(alerts=WITHOUT_DEADLINE)
    run = dag.test(logical_date=D)
    assert run.state == "success"
    assert task_states(dag.dag_id, run.run_id)["send_alerts"] == "success"
    assert receiver.received == []
    with create_session() as session:
        xcoms = [
            (x.key, x.value)
            for x in session.query(XComModel).filter(
                XComModel.dag_id == dag.dag_id,
                XComModel.run_id == run.run_id,
                XComModel.task_id == "send_alerts",
            )
        ]
    assert [key for key, _ in xcoms] == ["return_value"], "one XCom, not one per key"
    assert xcoms[0][1]["alerts"] == []
    assert db.execute(
        "SELECT count(*) AS n FROM retention.alerts WHERE policy = %s", (unique_name,)
    ).fetchone() == {"n": 0}


def test_the_dag_carries_the_deadline_alert_and_send_alerts_after_reconcile(
    load_dag: Callable[..., Any],
) -> None:
    from airflow.sdk.definitions.deadline import DagRunQueuedAtDeadline
    from airflow.serialization.serialized_objects import DagSerialization

    dag = load_dag(alerts=ALERTS)
    [deadline] = dag.deadline
    assert deadline.interval == dt.timedelta(minutes=45)
    assert isinstance(deadline.reference, DagRunQueuedAtDeadline)
    assert deadline.callback.path == "retention.airflow.alerts.on_deadline_missed"
    assert deadline.callback.kwargs["conn_id"] == CONN_ID
    serialized = DagSerialization.to_dict(dag)["dag"]["deadline"]
    assert [d["interval"]["__data__"] for d in serialized] == [45 * 60.0]
    send_alerts = dag.get_task("send_alerts")
    assert send_alerts.upstream_task_ids == {"reconcile"}
    assert send_alerts.trigger_rule == "all_done"
    assert "| alerts | dirty → `ops_alerts`" in (dag.doc_md or "")

    plain = load_dag()
    assert plain.deadline is None
    assert "send_alerts" not in plain.task_dict
