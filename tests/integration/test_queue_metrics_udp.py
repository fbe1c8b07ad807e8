"""The queue figures operators watch arrive over real UDP while a drain runs, not only at
reconcile: Airflow's own StatsD client, in this process, sends to a socket on loopback
while a worker pass deletes through a real API and delivers to a real events_receiver.

Every figure is checked against what the database and the servers saw: jobs claimed
(one of them taken over after its lease expired), calls admitted, jobs completed, the
oldest pending and leased ages, the dead letters, the mean call latency, the verdict
on what bounded the pass, and each event's acknowledgement lag.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.receiver import Receiver
from retention import metrics
from retention.db.connection import Connection
from retention.queue.worker import WorkerStats
from tests.support.policies import remote_policy
from tests.support.remote import deliver, enqueue_all, work
from tests.support.statsd import StatsdReceiver, airflow_statsd_installed
from tests.support.tables import count, create_media_table

OBJECTS = 30
LATENCY_MS = 100  # 3 s of calls: the figures of the first batch come long before the end


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsdReceiver]:
    """Airflow's StatsD logger, sending to a socket on loopback, installed as
    retention's sink for the test."""
    monkeypatch.delenv(metrics.NAMES_VARIABLE, raising=False)
    with airflow_statsd_installed() as receiver:
        yield receiver


def claims(db: Connection, policy: str) -> int:
    return count(db, "SELECT sum(claim_count) FROM retention.operations WHERE policy = %s", policy)


def test_a_drain_sends_the_queue_figures_over_udp_while_it_runs(
    db: Connection,
    test_dsn: str,
    unique_name: str,
    sandbox: Any,
    events_receiver: Receiver,
    statsd: StatsdReceiver,
) -> None:
    notify = {"http_conn_id": "events_receiver", "endpoint": "/hooks/retention"}
    policy = remote_policy(unique_name, notify=notify, claim_batch=4, max_attempts=1)
    create_media_table(db, unique_name, OBJECTS)
    sandbox.state.configure(latency_ms=LATENCY_MS, reject=["obj-3"])
    enqueue_all(db, policy)
    db.execute(  # a worker took one operation and was lost: its lease has expired
        "UPDATE retention.operations SET state = 'in_flight', lease_owner = 'lost', "
        "lease_expires_at = now() - interval '1 second', claim_count = claim_count + 1 "
        "WHERE operation_key = (SELECT min(operation_key) FROM retention.operations "
        "WHERE policy = %s)",
        (unique_name,),
    )
    claimed_before = claims(db, unique_name)
    passes: list[WorkerStats] = []
    drain = threading.Thread(target=lambda: passes.append(work(test_dsn, policy, sandbox)))

    drain.start()
    mine = f"retention.{unique_name}"
    statsd.wait_for(f"{mine}.queue.oldest_pending_age_seconds.operations", timeout=30)
    assert drain.is_alive(), "the queue's figures arrived while the drain was still working"
    drain.join(timeout=120)

    (stats,) = passes
    ops = {
        row["state"]: row["n"]
        for row in db.execute(
            "SELECT state, count(*) AS n FROM retention.operations WHERE policy = %s GROUP BY 1",
            (unique_name,),
        )
    }
    assert ops == {"done": OBJECTS - 1, "dead": 1}

    def total(name: str) -> float:
        return sum(statsd.values(f"{mine}.{name}.operations", "c"))

    assert total("queue.claimed") == claims(db, unique_name) - claimed_before
    assert total("queue.lease_expiries") == 1, "the lost worker's operation"
    assert total("queue.completed") == ops["done"]
    requests = len(sandbox.state.stats()["requests"])
    assert total("queue.admitted") == stats.tokens_taken >= requests
    pending = statsd.values(f"{mine}.queue.oldest_pending_age_seconds.operations", "g")
    leased = statsd.values(f"{mine}.queue.oldest_leased_age_seconds.operations", "g")
    assert pending[0] > 0, "operations were waiting when the first batch ended"
    assert (pending[-1], leased[-1]) == (0, 0), "none waits when the pass ends"
    assert len(pending) == len(leased) >= 2, "after the first batch and at the end"
    assert statsd.last_gauge(f"{mine}.dead_letters.operations") == ops["dead"]
    assert statsd.last_gauge(f"{mine}.remote.call_ms.operations") >= LATENCY_MS
    assert stats.bound is not None
    assert statsd.last_gauge(f"{mine}.bound_by") == metrics.BOUND_CODES[stats.bound.verdict]
    assert statsd.last_gauge(f"{mine}.bound.share.limiter") == stats.bound.limiter_share

    delivered = deliver(test_dsn, policy, events_receiver)
    assert delivered.done == ops["done"] == len(events_receiver.events)
    statsd.wait_for(f"{mine}.queue.oldest_pending_age_seconds.events")
    lags = statsd.values(f"{mine}.events.ack_lag_ms", "ms")
    assert len(lags) == delivered.done, "one acknowledgement lag per event delivered"
    oldest = db.execute(
        "SELECT extract(epoch FROM now() - min(created_at))::float8 AS seconds "
        "FROM retention.outbox WHERE policy = %s",
        (unique_name,),
    ).fetchone()
    assert oldest is not None
    oldest_ms = 1000 * oldest["seconds"]
    assert all(0 < lag <= oldest_ms for lag in lags), (lags, oldest_ms)
    assert sum(statsd.values(f"{mine}.queue.completed.events", "c")) == delivered.done
    assert statsd.last_gauge(f"{mine}.queue.oldest_pending_age_seconds.events") == 0
