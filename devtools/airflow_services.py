"""Airflow's own processes for end-to-end tests and the scale benchmark: the api-server,
the dag-processor, the scheduler and Celery workers.

Each runs as a separate process, as a deployment runs them, with the caller's
Airflow home and metadata database. Every wait has a deadline.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
import yaml

AIRFLOW = str(Path(sys.executable).parent / "airflow")
STARTUP_SECONDS = 120


def wait_for(check: Callable[[], bool], seconds: float, what: str, step: float = 0.5) -> None:
    """Poll ``check`` until it holds, or fail naming ``what`` once ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {seconds:g} s")
        time.sleep(step)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen[bytes], grace: float = 30) -> None:
    """SIGTERM to the leader (a warm shutdown), then SIGKILL to its whole process group.

    The group goes too when the leader stopped by itself, so that no pool
    process or task supervisor outlives the worker.
    """
    if process.poll() is None:
        process.terminate()
        with suppress(subprocess.TimeoutExpired):
            process.wait(grace)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


@contextmanager
def airflow_process(
    name: str, args: list[str], env: dict[str, str], logs: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """One Airflow command in its own process group, stopped (then killed) on exit."""
    with (logs / f"{name}.log").open("wb") as log:
        process = subprocess.Popen(
            [AIRFLOW, *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield process
        finally:
            _stop(process)


@contextmanager
def api_server(env: dict[str, str], logs: Path, *, apps: str = "all") -> Iterator[str]:
    """An api-server on a free port; yields its base URL once it answers its health check.

    Airflow's CLI takes a port number, not a bound socket, so another process
    could take the port between choosing and binding it: a server that exits
    without answering is started again on a new port (at most 3 times).
    """
    for _ in range(3):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = ["api-server", "--port", str(port), "--apps", apps]
        server_env = {**env, "AIRFLOW__API__PORT": str(port)}
        with airflow_process("api-server", command, server_env, logs) as process:

            def answering(process: subprocess.Popen[bytes] = process, url: str = url) -> bool:
                if process.poll() is not None:
                    return True
                try:  # any answer will do: `--apps execution` has no health endpoint
                    return requests.get(f"{url}/api/v2/monitor/health", timeout=2).status_code < 500
                except requests.RequestException:
                    return False

            wait_for(answering, STARTUP_SECONDS, "the api-server answering")
            if process.poll() is None:
                yield url
                return
    raise RuntimeError(f"the api-server did not start; see {logs / 'api-server.log'}")


def service_environment(**extra: str) -> dict[str, str]:
    """This process's environment (the test home and metadata database) plus ``extra``."""
    return {**os.environ, **extra}


def serialize_replay_dag(env: dict[str, str]) -> None:
    """Store ``retention__replay`` in the metadata database (as the dag-processor would), so
    that it can be triggered, with its policy list from ``env``'s ``RETENTION_POLICIES``.

    Another test's ``dag.test()`` may have stored it with that test's policies (the
    metadata database is shared), and ``reserialize`` keeps such a version: it is
    forgotten first.
    """
    forgotten = subprocess.run(
        [AIRFLOW, "dags", "delete", "retention__replay", "--yes"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert forgotten.returncode == 0 or "not found" in forgotten.stderr.lower(), forgotten.stderr[
        -3000:
    ]
    reserialized = subprocess.run(
        [AIRFLOW, "dags", "reserialize"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert reserialized.returncode == 0, reserialized.stderr[-3000:]


def scheduler_environment(policies: Path, logs: Path, **extra: str) -> dict[str, str]:
    """``service_environment`` for a scheduler test: DAGs from ``policies``, parsed and
    scheduled every few seconds, unpaused at creation, logs under ``logs``."""
    return service_environment(
        RETENTION_POLICIES=str(policies),
        AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="5",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1",
        AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(logs / "logs"),
        **extra,
    )


def api_user(logs: Path, name: str, role: str) -> tuple[dict[str, str], str]:
    """SimpleAuthManager settings for the api-server with one user, ``name`` of ``role``,
    whose password (returned with the settings) is written beforehand to a file in
    ``logs``: the api-server keeps a password it finds there."""
    password = secrets.token_urlsafe(16)
    passwords = logs / "simple_auth_manager_passwords.json"
    passwords.write_text(json.dumps({name: password}))
    settings = {
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{name}:{role}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
    }
    return settings, password


def api_connection(url: str, login: str, password: str) -> str:
    """The ``AIRFLOW_CONN_*`` value (JSON) of an HTTP connection to the api-server at
    ``url``, as ``login``: how tasks reach Airflow's REST API."""
    parts = urlsplit(url)
    return json.dumps(
        {
            "conn_type": "http",
            "host": parts.hostname,
            "port": parts.port,
            "schema": parts.scheme,
            "login": login,
            "password": password,
        }
    )


def task_log(logs: Path, dag_id: str, run_id: str, task_id: str) -> str:
    """Every attempt's log of an unmapped task of one run (the scheduler test's log folder)."""
    folder = logs / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    return "\n".join(path.read_text() for path in sorted(folder.glob("attempt=*.log")))


def publish_policy(policies: Path, logs: Path, name: str, fields: dict[str, Any]) -> str:
    """Make ``name`` the policies file's one policy, manual runs only; returns its DAG id
    once the dag-processor has parsed it."""
    from airflow.models.serialized_dag import SerializedDagModel

    fields["schedule"] = None  # manual runs only (policy_fields drops None values)
    policies.write_text(yaml.safe_dump({"policies": {name: fields}}))
    dag_id = f"retention__{name}"
    wait_for(
        lambda: SerializedDagModel.has_dag(dag_id), 120, f"{dag_id} being parsed\n{tail(logs)}", 2
    )
    return dag_id


def sandbox_connection(server: Any) -> str:
    """The ``AIRFLOW_CONN_*`` value (JSON) of an HTTP connection to a server on loopback."""
    return json.dumps(
        {
            "conn_type": "http",
            "host": "127.0.0.1",
            "port": server.server_address[1],
            "schema": "http",
        }
    )


def trigger_run(dag_id: str, logical_date: dt.datetime) -> str:
    """Trigger one run as the UI would (the scheduler picks it up); returns its run id."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType

    with create_session() as session:
        run = trigger_dag(
            dag_id,
            triggered_by=DagRunTriggeredByType.TEST,
            logical_date=logical_date,
            session=session,
        )
        assert run is not None
        return run.run_id


def wait_for_run_end(dag_id: str, run_id: str, seconds: float, logs: Path) -> str:
    """Wait until the run is ``success`` or ``failed`` (failing the test at ``seconds``,
    with the logs' ends); returns that state."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    def state() -> str | None:
        with create_session() as session:
            return session.query(DagRun.state).filter_by(dag_id=dag_id, run_id=run_id).scalar()

    wait_for(
        lambda: state() in ("success", "failed"), seconds, f"run {run_id} ending\n{tail(logs)}", 2
    )
    return str(state())


def tail(logs: Path, chars: int = 3000) -> str:
    """The end of every log in ``logs``, for assertion messages."""
    return "\n".join(f"--- {p.name}\n{p.read_text()[-chars:]}" for p in sorted(logs.glob("*.log")))


# --- CeleryExecutor -----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
# A local Redis by default; RETENTION_CELERY_BROKER_URL points elsewhere.
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/0"
WORKER_NAME_VARIABLE = "RETENTION_CELERY_WORKER_NAME"


def celery_broker_url() -> str:
    return os.environ.get("RETENTION_CELERY_BROKER_URL", DEFAULT_BROKER_URL)


def broker_unreachable(broker_url: str) -> str | None:
    """Why the Celery tests cannot run against ``broker_url`` (None: they can)."""
    try:
        import celery  # noqa: F401  (the provider brings celery[redis])
        import redis
    except ImportError as missing:
        return f"the celery provider is not installed ({missing}): see requirements-dev.txt"
    try:
        redis.Redis.from_url(broker_url, socket_connect_timeout=2, socket_timeout=2).ping()
    except redis.RedisError as error:
        return f"no Redis broker at {broker_url}: {error}"
    return None


def database_result_backend(sql_alchemy_conn: str) -> str:
    """Celery's database result backend on an Airflow metadata database URL.

    A URL without a driver gets psycopg (3), as Airflow's own default does;
    an explicit driver (``postgresql+psycopg2://``) is kept.
    """
    for bare in ("postgresql://", "postgres://"):
        if sql_alchemy_conn.startswith(bare):
            sql_alchemy_conn = "postgresql+psycopg://" + sql_alchemy_conn.removeprefix(bare)
    return f"db+{sql_alchemy_conn}"


def celery_environment(
    broker_url: str, result_backend: str, *, run_tag: str | None = None
) -> dict[str, str]:
    """The settings that make the scheduler and the workers use CeleryExecutor.

    Everything this run puts in the broker is kept apart from any other run
    sharing the same Redis: its keys carry a prefix of its own (kombu's
    ``global_keyprefix``, which also covers the workers' control channel) and
    its tasks go to a queue of its own (``[operators] default_queue``, which
    ``celery_workers`` serves).
    """
    tag = run_tag or uuid.uuid4().hex[:10]
    return {
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CELERY__BROKER_URL": broker_url,
        "AIRFLOW__CELERY__RESULT_BACKEND": result_backend,
        "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__GLOBAL_KEYPREFIX": f"retention-{tag}:",
        "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "3600",
        "AIRFLOW__OPERATORS__DEFAULT_QUEUE": f"retention-{tag}",
    }


def worker_hostname() -> str:
    """``[core] hostname_callable`` of the test's workers: the Celery worker's own name.

    Each worker of a deployment runs on a host of its own; the test's workers
    share one machine, so each task records the name of the worker that ran it
    (``task_instance.hostname``), which is how a test tells the workers apart.
    """
    return os.environ.get(WORKER_NAME_VARIABLE) or socket.getfqdn()


def worker_name(worker: subprocess.Popen[bytes]) -> str:
    """The full name (``worker<i>-<tag>@<host>``) of a worker ``celery_workers`` started."""
    args = list(worker.args)
    return str(args[args.index("--celery-hostname") + 1])


def forget_broker_keys(env: dict[str, str]) -> int:
    """Delete what this run left in Redis (its prefixed keys); returns how many.

    Call it once the scheduler and the workers have stopped.
    """
    prefix = env.get("AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__GLOBAL_KEYPREFIX")
    if not prefix:
        return 0
    import redis

    client = redis.Redis.from_url(
        env["AIRFLOW__CELERY__BROKER_URL"], socket_connect_timeout=5, socket_timeout=5
    )
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=500))
        if keys:
            client.delete(*keys)
        return len(keys)
    finally:
        client.close()


def _running_workers(env: dict[str, str]) -> set[str]:
    """The workers answering on the broker, as ``airflow celery list-workers`` lists them."""
    try:
        listed = subprocess.run(
            [AIRFLOW, "celery", "list-workers", "--output", "json"],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return set()
    for line in reversed(listed.stdout.decode(errors="replace").splitlines()):
        if line.startswith("["):
            with suppress(ValueError):
                return {worker["worker_name"] for worker in json.loads(line)}
    return set()


@contextmanager
def celery_workers(
    env: dict[str, str], logs: Path, count: int = 2, concurrency: int = 2
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` ``airflow celery worker`` processes, each of ``concurrency`` task slots.

    ``env`` comes from ``celery_environment`` (plus the execution API URL): the
    workers serve its queue. Each has a name of its own (``worker<i>-<tag>@<host>``),
    its own log ``celery-worker<i>.log`` in ``logs``, no log server (they would
    share its port) and records its name as the tasks' hostname (see
    ``worker_hostname``). Yields once every worker answers on the broker; stops
    them (warm shutdown, then their process groups killed) on exit.
    """
    queue = env.get("AIRFLOW__OPERATORS__DEFAULT_QUEUE", "default")
    tag = uuid.uuid4().hex[:6]
    host = socket.gethostname()
    names = [f"worker{i}-{tag}@{host}" for i in range(count)]
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    with ExitStack() as stack:
        workers: list[subprocess.Popen[bytes]] = []
        for i, name in enumerate(names):
            worker_env = {
                **env,
                "PYTHONPATH": path,
                WORKER_NAME_VARIABLE: name,
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{__name__}.worker_hostname",
            }
            command = [
                "celery",
                "worker",
                "--celery-hostname",
                name,
                "--queues",
                queue,
                "--concurrency",
                str(concurrency),
                "--skip-serve-logs",
                "--without-mingle",
                "--without-gossip",
            ]
            workers.append(
                stack.enter_context(airflow_process(f"celery-worker{i}", command, worker_env, logs))
            )

        def ready() -> bool:
            exited = [names[i] for i, p in enumerate(workers) if p.poll() is not None]
            if exited:
                raise RuntimeError(f"celery worker(s) {exited} exited at start\n{tail(logs)}")
            return set(names) <= _running_workers(env)

        wait_for(ready, STARTUP_SECONDS, f"celery workers {names} answering", step=2)
        yield workers
