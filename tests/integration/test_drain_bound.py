"""What bounds a drain, measured: two windows of a remote run work at once in a pool of two
slots against a real API on loopback, each pass reading the pool's stats from a stand-in
of Airflow's REST API; reconcile's summary says what bounded the run and what to tune.

- an API that answers in 200 ms, asked for 20 calls/s: the limiter is never short, every
  worker is busy calling and the pool is full, so the run is capacity-bound and the
  pool needs ``ceil(20 × latency × 1.2)`` slots (5 at 200 ms), not 2;
- an API that allows fewer calls than the policy's rate: the limiter is closed most of
  the time, so the run is upstream-bound, at the rate the API allows.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from retention.airflow.pools import pool_watch
from retention.db.connection import Connection, connect_dsn
from retention.evidence.reconcile import reconcile
from retention.objects.deleter import ObjectDeleter
from retention.objects.kind import OperationsKind
from retention.policy import Policy
from retention.queue.bound import PassTime
from retention.rows.windows import Window
from tests.support.airflow_pools import AirflowPools
from tests.support.policies import make_policy, remote_fields
from tests.support.remote import sandbox_sender
from tests.support.tables import create_media_table, plan

POOL = "media_api"
SLOTS = 2
RATE = 20  # calls per second the policy asks for
LATENCY_MS = 200
OBJECTS_PER_WINDOW = 12  # 2.4 s of calls a window: a few samples of the pool each


@pytest.fixture
def airflow_pools(monkeypatch: pytest.MonkeyPatch) -> Iterator[AirflowPools]:
    """The pool's stats through ``retention_airflow_api``, as a pass reads them in a task."""
    server = AirflowPools(POOL, SLOTS).start()
    monkeypatch.setenv("AIRFLOW_CONN_RETENTION_AIRFLOW_API", server.connection())
    yield server
    server.stop()


def two_windows(db: Connection, name: str, **remote: Any) -> tuple[Policy, list[Window]]:
    """A remote policy in the pool, its table, and a plan of two windows."""
    create_media_table(db, name, 2 * OBJECTS_PER_WINDOW)
    policy = make_policy(
        name,
        window_rows=OBJECTS_PER_WINDOW,
        batch_rows=OBJECTS_PER_WINDOW,
        window_per_tenant=False,
        remote=remote_fields(name, pool=POOL, rate_per_second=RATE, claim_batch=4, **remote),
    )
    windows = plan(db, policy, min_windows=SLOTS)
    assert len(windows) == SLOTS
    return policy, windows


def run_in_the_pool(
    test_dsn: str, policy: Policy, windows: list[Window], sandbox: Any, pools: AirflowPools
) -> None:
    """Each window as its own task, all at once: each holds a slot of the pool while it runs
    (the scheduler's part) and deletes through the deleter a task uses."""
    started = threading.Barrier(len(windows))
    errors: list[BaseException] = []
    deleter = ObjectDeleter(
        policy.table_spec,
        policy.timeouts,
        policy=policy,
        open_kind=lambda: OperationsKind(policy, sandbox_sender(sandbox)),
        open_pool=lambda: pool_watch(POOL, policy.pool_slots),
    )

    def task(window: Window) -> None:
        try:
            with pools.task(policy.pool_slots), connect_dsn(test_dsn) as conn:
                started.wait(timeout=30)  # both tasks are running before either works
                deleter.run(conn, window, batch_rows=policy.batch_rows, dry_run=False)
        except BaseException as failed:  # surfaced below
            errors.append(failed)

    threads = [threading.Thread(target=task, args=(w,)) for w in windows]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors


def measured(db: Connection, policy: Policy) -> PassTime:
    """The time the run's windows measured, as the ledger summed it."""
    total = PassTime()
    for row in db.execute(
        "SELECT drain_time FROM retention.windows WHERE policy = %s", (policy.name,)
    ):
        total += PassTime.of(row["drain_time"])
    return total


def test_a_two_slot_pool_calling_a_200_ms_api_at_20_per_second_is_capacity_bound(
    db: Connection, test_dsn: str, unique_name: str, sandbox: Any, airflow_pools: AirflowPools
) -> None:
    sandbox.state.configure(latency_ms=LATENCY_MS)  # the API allows far more than 20/s
    policy, windows = two_windows(db, unique_name, burst=5)

    run_in_the_pool(test_dsn, policy, windows, sandbox, airflow_pools)
    bound = reconcile(db, policy, "run-1").bound

    assert bound is not None
    time = measured(db, policy)
    latency = time.calling / time.calls
    assert LATENCY_MS / 1000 <= latency < 1.3 * LATENCY_MS / 1000, "the API's own latency"
    assert bound.verdict == "capacity", bound.says
    assert bound.pool_slots == SLOTS
    assert bound.slots_needed == math.ceil(RATE * latency * 1.2)
    assert bound.slots_needed in (5, 6), "20/s at 200 ms and a little more: 4.8 → 5"
    assert bound.says.startswith(f"capacity-bound: pool `{POOL}` has {SLOTS} slots, busy "), (
        bound.says
    )
    assert bound.says.endswith(f"{RATE}/s needs {bound.slots_needed}"), bound.says
    assert bound.pool_busy_share is not None
    assert bound.pool_busy_share >= 0.8
    assert bound.limiter_share < 0.25, "the limiter always had a token"
    assert time.calls == 2 * OBJECTS_PER_WINDOW
    assert ("POST", "/auth/token") in airflow_pools.requests, "read through the REST API"


def test_an_api_allowing_less_than_the_rate_is_upstream_bound(
    db: Connection, test_dsn: str, unique_name: str, sandbox: Any, airflow_pools: AirflowPools
) -> None:
    sandbox.state.configure(latency_ms=LATENCY_MS, rate=4, burst=2)  # 429s above 4/s
    policy, windows = two_windows(db, unique_name, burst=5)

    run_in_the_pool(test_dsn, policy, windows, sandbox, airflow_pools)
    bound = reconcile(db, policy, "run-1").bound

    assert bound is not None
    assert sandbox.state.stats()["throttled"] > 0, "the API answered 429"
    assert bound.verdict == "upstream", bound.says
    assert bound.limiter_share >= 0.25
    assert bound.effective_rate is not None
    assert bound.effective_rate < RATE
    assert bound.slots_needed is None, "no slots to add: nothing to tune here"
    assert bound.says.startswith("upstream-bound: the limiter had no token or was closed ")
    assert bound.says.endswith(f"rate_per_second is {RATE}/s): nothing to tune here")
