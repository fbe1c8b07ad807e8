"""Marking a run failed stops its windows gracefully under the real scheduler.

The api-server, dag-processor and scheduler run as separate processes
(LocalExecutor), as in a deployment. A remote policy's window calls a slow
sandbox API; the test marks the DAG run failed the way the UI does. Airflow
notices at the task's next heartbeat and sends SIGTERM, then SIGKILL five
seconds later. The window must stop before the SIGKILL: its ledger row ends
``cancelled`` (a killed task would leave it ``running``), no call starts after
that, the operations it claimed but never called are ``pending`` again with no
lease, and the run has a partial summary.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from devtools.airflow_services import (
    airflow_process,
    api_server,
    publish_policy,
    sandbox_connection,
    scheduler_environment,
    tail,
    trigger_run,
    wait_for,
)
from devtools.sandbox_api import SandboxServer
from tests.support.policies import HTTP_CONN_ID, policy_fields, remote_fields
from tests.support.tables import create_media_table

pytestmark = pytest.mark.scheduler

OBJECTS = 60
LATENCY_MS = 400  # 60 calls one after another: 24 s, far longer than the test waits


@pytest.fixture
def services(tmp_path: Path, unique_name: str) -> Iterator[tuple[Path, SandboxServer]]:
    logs = tmp_path
    policies = logs / "policies.yaml"
    with ExitStack() as stack:
        sandbox = SandboxServer(0, latency_ms=LATENCY_MS).start()
        stack.callback(sandbox.stop)
        fields = policy_fields(
            unique_name,
            window_rows=OBJECTS * 2,
            batch_rows=OBJECTS,
            window_per_tenant=False,
            remote=remote_fields(
                unique_name,
                version_column=None,
                rate_per_second=100,
                burst=10,
                claim_batch=20,
                request_timeout_seconds=5,
            ),
        )
        env = scheduler_environment(
            policies,
            logs,
            **{f"AIRFLOW_CONN_{HTTP_CONN_ID.upper()}": sandbox_connection(sandbox)},
            AIRFLOW__CORE__EXECUTOR="LocalExecutor",
            AIRFLOW__API_AUTH__JWT_SECRET="retention-stop-test-secret",
            # the task checks in every 2 s, so a run marked failed is noticed within 2 s
            AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL="2",
        )
        url = stack.enter_context(api_server(env, logs, apps="execution"))
        env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"{url}/execution/"
        stack.enter_context(airflow_process("dag-processor", ["dag-processor"], env, logs))
        stack.enter_context(airflow_process("scheduler", ["scheduler"], env, logs))
        publish_policy(policies, logs, unique_name, fields)
        yield logs, sandbox


def test_marking_a_run_failed_cancels_its_window_before_the_sigkill(
    db, unique_name, services
) -> None:
    from airflow.api.common.mark_tasks import set_dag_run_state_to_failed
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session

    logs, sandbox = services
    dag_id = f"retention__{unique_name}"
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    logical_date = today - dt.timedelta(days=1)
    create_media_table(
        db, unique_name, OBJECTS, tenants=1, cutoff=logical_date - dt.timedelta(days=30)
    )
    run_id = trigger_run(dag_id, logical_date)
    calls = lambda: len(sandbox.state.stats()["requests"])  # noqa: E731
    wait_for(lambda: calls() >= 3, 240, f"the window calling the API\n{tail(logs)}", 0.2)

    marked = time.monotonic()
    with create_session() as session:
        dag = SerializedDagModel.get_dag(dag_id, session=session)
        assert dag is not None
        set_dag_run_state_to_failed(dag=dag, run_id=run_id, commit=True, session=session)

    def window_state() -> str:
        row = db.execute(
            "SELECT state FROM retention.windows WHERE policy = %s AND run_id = %s",
            (unique_name, run_id),
        ).fetchone()
        return row["state"] if row else "none"

    wait_for(lambda: window_state() != "running", 30, f"the window ending\n{tail(logs)}", 0.2)
    ended = time.monotonic()
    assert window_state() == "cancelled", (
        f"the window was not stopped gracefully: {window_state()}\n{tail(logs)}"
    )
    calls_at_cancel = calls()
    time.sleep(3)  # anything still running would call again within this
    assert calls() == calls_at_cancel, "no call after the window was cancelled"
    assert calls_at_cancel < OBJECTS, "the window stopped early"
    assert ended - marked < 20, "heartbeat interval + a batch, not a SIGKILL later"
    print(  # shown with -rP: the figure docs/runs.md's Stopping paragraph quotes
        f"marked failed → window cancelled in {ended - marked:.1f} s; "
        f"{calls_at_cancel} of {OBJECTS} calls made"
    )
    by_state = {
        row["state"]: (row["n"], row["leased"])
        for row in db.execute(
            "SELECT state, count(*) AS n, count(lease_owner) AS leased FROM retention.operations "
            "WHERE policy = %s GROUP BY state",
            (unique_name,),
        )
    }
    assert "in_flight" not in by_state, f"leases left held: {by_state}"
    assert by_state["done"][0] == len(sandbox.state.stats()["effects"])
    assert by_state["pending"][1] == 0
    assert by_state["done"][0] + by_state["pending"][0] == OBJECTS
    summary = db.execute(
        "SELECT status, summary FROM retention.runs WHERE policy = %s AND run_id = %s",
        (unique_name, run_id),
    ).fetchone()
    assert summary is not None
    assert summary["status"] == "cancelled"
    assert summary["summary"]["windows_by_state"] == {"cancelled": 1}
