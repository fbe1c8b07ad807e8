"""Pools cap concurrent API callers in a run under the real scheduler (LocalExecutor).

Starts the api-server, the dag-processor and the scheduler as separate
processes, as a deployment runs them, triggers a remote policy's DAG with six
windows against a slow sandbox API, and reads the sandbox's own count of
concurrent requests: it never exceeds the pool's two slots.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.policies import HTTP_CONN_ID, policy_fields
from tests.support.tables import count, create_media_table

pytestmark = pytest.mark.scheduler

STARTUP_SECONDS = 120
RUN_SECONDS = 180


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def policies_file(tmp_path: Path) -> Path:
    return tmp_path / "policies.yaml"


@pytest.fixture
def airflow_services(tmp_path: Path, policies_file: Path, sandbox) -> Iterator[dict[str, str]]:
    """api-server + dag-processor + scheduler sharing this test's environment."""
    port = free_port()
    policies_file.write_text("policies: {}\n")
    env = {
        **os.environ,
        "RETENTION_POLICIES": str(policies_file),
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": "retention-scheduler-test-secret",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(tmp_path / "logs"),
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    commands = {
        "api-server": [airflow, "api-server", "--port", str(port), "--apps", "execution"],
        "dag-processor": [airflow, "dag-processor"],
        "scheduler": [airflow, "scheduler"],
    }
    processes = {}
    for name, command in commands.items():
        log = (tmp_path / f"{name}.log").open("w")
        processes[name] = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield {name: str(tmp_path / f"{name}.log") for name in commands}
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def test_pool_slots_cap_concurrent_callers_under_the_scheduler(
    db, unique_name, sandbox, policies_file, airflow_services, request
) -> None:
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.models.dagrun import DagRun
    from airflow.models.pool import Pool
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType

    pool = f"pool_{unique_name}"
    Pool.create_or_update_pool(pool, slots=2, description="test", include_deferred=False)
    request.addfinalizer(lambda: Pool.delete_pool(pool))
    create_media_table(db, unique_name, 30, tenants=1)
    sandbox.state.configure(latency_ms=150)
    fields = policy_fields(unique_name, window_rows=5, batch_rows=5, window_per_tenant=False)
    fields["schedule"] = None
    fields["remote"] = {
        "http_conn_id": HTTP_CONN_ID,
        "endpoint": "/v1/assets/{object_id}",
        "object_id_column": "object_key",
        "rate_per_second": 100,
        "burst": 10,
        "limiter_scope": unique_name,
        "pool": pool,
        "request_timeout_seconds": 5,
    }
    # The dag-processor re-parses the DAG files every few seconds and picks this up.
    policies_file.write_text(yaml.safe_dump({"policies": {unique_name: fields}}))
    dag_id = f"retention__{unique_name}"

    deadline = time.monotonic() + STARTUP_SECONDS
    while not SerializedDagModel.has_dag(dag_id):
        assert time.monotonic() < deadline, _logs(airflow_services)
        time.sleep(2)
    with create_session() as session:
        run = trigger_dag(
            dag_id,
            triggered_by=DagRunTriggeredByType.TEST,
            logical_date=dt.datetime(2026, 4, 1, tzinfo=dt.UTC),
            session=session,
        )
        assert run is not None
        run_id = run.run_id
    deadline = time.monotonic() + RUN_SECONDS
    state = None
    while state not in ("success", "failed"):
        assert time.monotonic() < deadline, f"run still {state}\n{_logs(airflow_services)}"
        time.sleep(2)
        with create_session() as session:
            state = session.query(DagRun.state).filter_by(dag_id=dag_id, run_id=run_id).scalar()
    assert state == "success", _logs(airflow_services)
    stats = sandbox.state.stats()
    assert len(stats["effects"]) == 30
    assert stats["peak_in_flight"] == 2, "two pool slots: two callers at once, never more"
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 0  # noqa: S608


def _logs(paths: dict[str, str]) -> str:
    return "\n".join(
        f"--- {name}\n{Path(path).read_text()[-3000:]}" for name, path in paths.items()
    )
