"""Pools and the shared rate limit hold under the real scheduler, on LocalExecutor and on
CeleryExecutor with two workers.

Starts the api-server (one for both executors), the dag-processor and the scheduler
as separate processes, as a deployment runs them (and, for Celery, two ``airflow celery
worker`` processes on a Redis broker), and counts at the sandbox API itself:

- pools: a remote policy's DAG with four windows against a slow sandbox; with
  two pool slots the sandbox never sees more than two requests at once; with the
  pool edited to six slots (LocalExecutor) the next run plans six windows, read
  from Airflow's pools when it plans, and shows more than two requests at once,
  so the cap is the pool's doing. The scheduler enforces pools, so the cap holds
  across workers.
- the shared limiter: eight windows, four at a time (two on each Celery
  worker), stay within ``rate × interval + burst`` in every interval, because
  every caller takes its tokens from the same row in Postgres; the Celery variant
  also shows, from ``task_instance.hostname``, that both workers ran windows,
  at the same time.

The Celery variants skip, saying why, when no Redis broker answers (see
``celery_broker_url``); the LocalExecutor variants always run.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devtools.airflow_services import (
    airflow_process,
    api_connection,
    api_server,
    api_user,
    broker_unreachable,
    celery_broker_url,
    celery_environment,
    celery_workers,
    database_result_backend,
    forget_broker_keys,
    publish_policy,
    sandbox_connection,
    scheduler_environment,
    service_environment,
    tail,
    task_log,
    trigger_run,
    wait_for_run_end,
    worker_name,
)
from devtools.sandbox_api import SandboxServer
from tests.support.policies import HTTP_CONN_ID, policy_fields, remote_fields
from tests.support.rates import max_in_any_interval, token_bucket_bound
from tests.support.tables import count, create_media_table

pytestmark = pytest.mark.scheduler

RUN_SECONDS = 300
OBJECTS_PER_WINDOW = 6  # 6 s of calls a window: windows starting seconds apart still overlap
WINDOWS = 4  # two rounds with two slots
MORE_SLOTS = 6  # the pool edited between runs: the next run plans one window a slot
POOL_LATENCY_MS = 1000
CELERY_WORKERS = 2
CELERY_CONCURRENCY = 2


@dataclass
class Services:
    """Airflow's processes for one executor, with the sandbox API their tasks call."""

    executor: str
    logs: Path
    policies: Path
    sandbox: SandboxServer
    workers: list[str] = field(default_factory=list)  # Celery workers' names


PLANNER = "retention_planner"  # the viewer as whom plan_windows reads the pool's slots


@pytest.fixture(scope="module")
def api(tmp_path_factory, test_dsn) -> Iterator[dict[str, str]]:
    """One api-server for both executors: the execution API of their tasks, and the REST
    API that ``plan_windows`` reads pools from. Yields the settings that point every other
    process at it."""
    logs = tmp_path_factory.mktemp("api-server")
    users, password = api_user(logs, PLANNER, "viewer")
    secret = {"AIRFLOW__API_AUTH__JWT_SECRET": "retention-scheduler-test-secret"}
    with api_server(service_environment(**secret, **users), logs, apps="core,execution") as url:
        yield {
            **secret,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW_CONN_RETENTION_AIRFLOW_API": api_connection(url, PLANNER, password),
        }


@pytest.fixture(scope="module", params=["LocalExecutor", "CeleryExecutor"], ids=["local", "celery"])
def airflow_services(request, tmp_path_factory, api) -> Iterator[Services]:
    """dag-processor + scheduler (+ two Celery workers), shared by this module's tests of
    one executor, on the module's api-server."""
    executor: str = request.param
    settings = {"AIRFLOW__CORE__EXECUTOR": "LocalExecutor"}
    if executor == "CeleryExecutor":
        broker = celery_broker_url()
        if problem := broker_unreachable(broker):
            pytest.skip(f"CeleryExecutor variant: {problem}")
        # Results in the test's own metadata database, as Airflow recommends (a
        # database, not the broker); no other checkout shares that database.
        backend = database_result_backend(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        settings = celery_environment(broker, backend)
    logs = tmp_path_factory.mktemp(executor)
    policies = logs / "policies.yaml"
    policies.write_text("policies: {}\n")
    with ExitStack() as stack:
        sandbox = SandboxServer(0).start()
        stack.callback(sandbox.stop)
        env = scheduler_environment(
            policies,
            logs,
            **{f"AIRFLOW_CONN_{HTTP_CONN_ID.upper()}": sandbox_connection(sandbox)},
            **api,
            **settings,
        )
        if executor == "CeleryExecutor":
            stack.callback(forget_broker_keys, env)  # last, once every process has stopped
        stack.enter_context(airflow_process("dag-processor", ["dag-processor"], env, logs))
        stack.enter_context(airflow_process("scheduler", ["scheduler"], env, logs))
        workers: list[str] = []
        if executor == "CeleryExecutor":
            started = stack.enter_context(
                celery_workers(env, logs, count=CELERY_WORKERS, concurrency=CELERY_CONCURRENCY)
            )
            workers = [worker_name(worker) for worker in started]
        yield Services(executor, logs, policies, sandbox, workers)


def publish(services: Services, name: str, fields: dict) -> str:
    """Make ``name`` the policies file's one policy; returns its DAG id once it is parsed."""
    return publish_policy(services.policies, services.logs, name, fields)


def run_with_slots(
    db,
    name: str,
    pool: str,
    slots: int,
    first_id: int,
    logical_date,
    logs: Path,
    rows: int = OBJECTS_PER_WINDOW * WINDOWS,
) -> str:
    """Trigger one run of ``rows`` rows with the pool at ``slots``; returns its run id."""
    from airflow.models.pool import Pool

    Pool.create_or_update_pool(pool, slots=slots, description="test", include_deferred=False)
    create_media_table(
        db, name, rows, tenants=1, first_id=first_id, cutoff=logical_date - dt.timedelta(days=30)
    )
    dag_id = f"retention__{name}"
    run_id = trigger_run(dag_id, logical_date)

    state = wait_for_run_end(dag_id, run_id, RUN_SECONDS, logs)
    assert state == "success", tail(logs)
    assert count(db, f"SELECT count(*) FROM public.{name}") == 0  # noqa: S608
    return run_id


def window_tasks(dag_id: str, run_id: str) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """(hostname, start, end) of the run's ``delete_window`` task instances."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(TI.hostname, TI.start_date, TI.end_date)
            .filter(TI.dag_id == dag_id, TI.run_id == run_id, TI.task_id == "delete_window")
            .all()
        )
    return [(host, start, end) for host, start, end in rows]


def remote_policy_fields(
    name: str, pool: str, per_window: int, *, rate: float, burst: int, **remote: Any
) -> dict[str, Any]:
    """A remote policy of windows of ``per_window`` objects, its calls in ``pool``."""
    return policy_fields(
        name,
        window_rows=per_window,
        batch_rows=per_window,
        window_per_tenant=False,
        remote=remote_fields(
            name,
            endpoint="/v1/assets/{object_id}",
            version_column=None,
            rate_per_second=rate,
            burst=burst,
            pool=pool,
            request_timeout_seconds=5,
            claim_batch=2,
            **remote,
        ),
    )


@pytest.fixture
def pool(unique_name: str) -> Iterator[str]:
    """A pool of this test's own, deleted afterwards."""
    from airflow.models.pool import Pool

    name = f"pool_{unique_name}"
    yield name
    Pool.delete_pool(name)


def test_pool_slots_cap_concurrent_callers_under_the_scheduler(
    db, unique_name, airflow_services, pool
) -> None:
    from airflow.models.pool import Pool

    services = airflow_services
    sandbox = services.sandbox
    # Slow calls, so that windows whose tasks start a few seconds apart (task start-up
    # on a loaded machine) still call at the same time: each window works only its
    # own operations, and with fast calls a window would finish before the next starts.
    sandbox.state.reset(latency_ms=POOL_LATENCY_MS)
    fields = remote_policy_fields(unique_name, pool, OBJECTS_PER_WINDOW, rate=100, burst=10)
    Pool.create_or_update_pool(pool, slots=2, description="test", include_deferred=False)
    publish(services, unique_name, fields)
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)

    dag_id = f"retention__{unique_name}"
    first = run_with_slots(db, unique_name, pool, 2, 1, today - dt.timedelta(days=2), services.logs)
    two = sandbox.state.stats()
    assert len(two["effects"]) == OBJECTS_PER_WINDOW * WINDOWS
    assert two["peak_in_flight"] <= 2, "two pool slots: never more than two callers at once"
    assert len(window_tasks(dag_id, first)) == WINDOWS
    planned = task_log(services.logs, dag_id, first, "plan_windows")
    assert f"pool {pool}: 2 slots (from Airflow's pools)" in planned, planned[-3000:]

    if services.executor == "CeleryExecutor":
        # The control below shows that the pool, not the executor, is what caps: the
        # scheduler enforces pools the same way for both executors, so it runs once (on
        # LocalExecutor); that Celery's two workers run windows at once is shown by the
        # limiter test below.
        return
    sandbox.state.reset(latency_ms=POOL_LATENCY_MS)
    # The pool edited between runs (as in the UI): the next plan follows it, although the
    # DAG was parsed when the pool had two slots and no settings file declares it.
    again = run_with_slots(
        db, unique_name, pool, MORE_SLOTS, 1001, today - dt.timedelta(days=1), services.logs
    )
    more = sandbox.state.stats()
    assert len(more["effects"]) == OBJECTS_PER_WINDOW * WINDOWS
    assert len(window_tasks(dag_id, again)) == MORE_SLOTS, "one window a slot of the edited pool"
    assert more["peak_in_flight"] > 2, "with more slots the same DAG has more callers at once"


RATE, BURST = 20, 5
LIMITED_WINDOWS = 8
LIMITED_PER_WINDOW = 12  # 96 calls: about 5 s at 20/s
# A request reaches the sandbox a little after its token was taken (another process,
# on a machine shared with the scheduler and the workers); one taken before an
# interval that arrives inside it adds to the interval's count. Up to this late is
# not counted as a faster rate; unlimited, the eight callers would exceed the bound
# many times over.
ARRIVAL_LATE_SECONDS = 0.25


def test_the_shared_limiter_holds_across_workers_under_the_scheduler(
    db, unique_name, airflow_services, pool
) -> None:
    from airflow.models.pool import Pool

    services = airflow_services
    sandbox = services.sandbox
    # 40 ms a call: each window alone could call 25 times a second, four at once 100.
    sandbox.state.reset(latency_ms=40)
    fields = remote_policy_fields(
        unique_name,
        pool,
        LIMITED_PER_WINDOW,
        rate=RATE,
        burst=BURST,
        limiter_scope=f"scope_{unique_name}",
    )
    slots = CELERY_WORKERS * CELERY_CONCURRENCY  # every task slot of both workers
    Pool.create_or_update_pool(pool, slots=slots, description="test", include_deferred=False)
    dag_id = publish(services, unique_name, fields)
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    rows = LIMITED_WINDOWS * LIMITED_PER_WINDOW
    run_id = run_with_slots(
        db, unique_name, pool, slots, 1, today - dt.timedelta(days=1), services.logs, rows=rows
    )

    stats = sandbox.state.stats()
    assert len(stats["effects"]) == rows
    assert set(stats["effects"].values()) == {1}, "each object deleted once"
    times = [r["t"] for r in stats["requests"]]
    span = max(times) - min(times)
    counts = [(s, max_in_any_interval(times, s)) for s in (0.5, 1.0, 2.0, 5.0)]
    for seconds, most in [*counts, (span, len(times))]:  # and the whole run
        bound = token_bucket_bound(RATE, BURST, seconds, late=ARRIVAL_LATE_SECONDS)
        assert most <= bound, (
            f"{most} requests in {seconds:.2f} s, more than {RATE}/s × "
            f"({seconds:.2f} s + {ARRIVAL_LATE_SECONDS} s late) + burst {BURST} = {bound:g}"
        )

    tasks = window_tasks(dag_id, run_id)
    assert len(tasks) == LIMITED_WINDOWS, tasks
    overlapping = [
        (a, b)
        for a, b in itertools.combinations(tasks, 2)
        if a[1] < b[2] and b[1] < a[2]  # both running at one moment
    ]
    assert overlapping, f"windows ran one at a time, not concurrently: {tasks}"
    if services.executor == "CeleryExecutor":
        hosts = {host for host, _, _ in tasks}
        assert hosts == set(services.workers), f"windows ran on {hosts}, not on both workers"
        assert any(a[0] != b[0] for a, b in overlapping), (
            f"the two workers never ran windows at the same time: {tasks}"
        )
