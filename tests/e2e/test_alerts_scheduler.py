"""The deadline alert under Airflow's own processes: the scheduler notices the missed
deadline and the triggerer runs the callback, which tells ``on_deadline`` once.

A run is held back with the pause switch (``retention_pause``) until the alert
has arrived, so the test waits for events, never for a guessed duration.
"""

from __future__ import annotations

import datetime as dt
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
