"""Pools cap concurrent API callers in a run under the real scheduler (LocalExecutor).

Starts the api-server, the dag-processor and the scheduler as separate
processes, as a deployment runs them, triggers a remote policy's DAG with six
windows against a slow sandbox API, and reads the sandbox's own count of
concurrent requests: with two pool slots it never exceeds two; with four slots
the same DAG shows more than two at once, so the cap is the pool's doing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from tests.support.airflow_services import (
    airflow_process,
    api_server,
    service_environment,
    tail,
    wait_for,
)
from tests.support.policies import policy_fields, remote_fields
from tests.support.tables import count, create_media_table

pytestmark = pytest.mark.scheduler

RUN_SECONDS = 240
OBJECTS_PER_WINDOW = 8
WINDOWS = 6


@pytest.fixture
def policies_file(tmp_path: Path) -> Path:
    path = tmp_path / "policies.yaml"
    path.write_text("policies: {}\n")
    return path


@pytest.fixture
def airflow_services(tmp_path: Path, policies_file: Path, sandbox) -> Iterator[Path]:
    """api-server + dag-processor + scheduler sharing this test's environment."""
    env = service_environment(
        RETENTION_POLICIES=str(policies_file),
        AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="5",
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__API_AUTH__JWT_SECRET="retention-scheduler-test-secret",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
        AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1",
        AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(tmp_path / "logs"),
    )
    with ExitStack() as stack:
        url = stack.enter_context(api_server(env, tmp_path, apps="execution"))
        env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"{url}/execution/"
        stack.enter_context(airflow_process("dag-processor", ["dag-processor"], env, tmp_path))
        stack.enter_context(airflow_process("scheduler", ["scheduler"], env, tmp_path))
        yield tmp_path


def run_with_slots(db, name: str, pool: str, slots: int, first_id: int, logical_date, logs):
    """Trigger one run with the pool at ``slots``; returns the sandbox's peak concurrency."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.models.dagrun import DagRun
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType

    Pool.create_or_update_pool(pool, slots=slots, description="test", include_deferred=False)
    rows = OBJECTS_PER_WINDOW * WINDOWS
    create_media_table(
        db, name, rows, tenants=1, first_id=first_id, cutoff=logical_date - dt.timedelta(days=30)
    )
    dag_id = f"retention__{name}"
    with create_session() as session:
        run = trigger_dag(
            dag_id,
            triggered_by=DagRunTriggeredByType.TEST,
            logical_date=logical_date,
            session=session,
        )
        assert run is not None
        run_id = run.run_id

    def finished() -> bool:
        with create_session() as session:
            state = session.query(DagRun.state).filter_by(dag_id=dag_id, run_id=run_id).scalar()
        return state in ("success", "failed")

    wait_for(finished, RUN_SECONDS, f"run {run_id} finishing\n{tail(logs)}", step=2)
    with create_session() as session:
        state = session.query(DagRun.state).filter_by(dag_id=dag_id, run_id=run_id).scalar()
    assert state == "success", tail(logs)
    assert count(db, f"SELECT count(*) FROM public.{name}") == 0  # noqa: S608


def test_pool_slots_cap_concurrent_callers_under_the_scheduler(
    db, unique_name, sandbox, policies_file, airflow_services, request
) -> None:
    from airflow.models.pool import Pool
    from airflow.models.serialized_dag import SerializedDagModel

    pool = f"pool_{unique_name}"
    request.addfinalizer(lambda: Pool.delete_pool(pool))
    sandbox.state.configure(latency_ms=300)
    fields = policy_fields(
        unique_name,
        window_rows=OBJECTS_PER_WINDOW,
        batch_rows=OBJECTS_PER_WINDOW,
        window_per_tenant=False,
        remote=remote_fields(
            unique_name,
            endpoint="/v1/assets/{object_id}",
            version_column=None,
            rate_per_second=100,
            burst=10,
            pool=pool,
            request_timeout_seconds=5,
            claim_batch=2,
        ),
    )
    fields["schedule"] = None  # manual runs only (policy_fields drops None values)
    # The dag-processor re-parses the DAG files every few seconds and picks this up.
    policies_file.write_text(yaml.safe_dump({"policies": {unique_name: fields}}))
    Pool.create_or_update_pool(pool, slots=2, description="test", include_deferred=False)
    dag_id = f"retention__{unique_name}"
    wait_for(
        lambda: SerializedDagModel.has_dag(dag_id),
        120,
        f"{dag_id} being parsed\n{tail(airflow_services)}",
        step=2,
    )
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)

    run_with_slots(db, unique_name, pool, 2, 1, today - dt.timedelta(days=2), airflow_services)
    two = sandbox.state.stats()
    assert len(two["effects"]) == OBJECTS_PER_WINDOW * WINDOWS
    assert two["peak_in_flight"] <= 2, "two pool slots: never more than two callers at once"

    sandbox.state.reset(latency_ms=300)
    run_with_slots(db, unique_name, pool, 4, 1001, today - dt.timedelta(days=1), airflow_services)
    four = sandbox.state.stats()
    assert len(four["effects"]) == OBJECTS_PER_WINDOW * WINDOWS
    assert four["peak_in_flight"] > 2, "with four slots the same run has more callers at once"
