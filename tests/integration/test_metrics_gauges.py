"""Metrics against the real database: the reconcile-time gauges and the worker's counters."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator

import pytest

from devtools.plans import CUTOFF
from retention import metrics
from retention.db.connection import Connection
from tests.support.policies import make_policy, remote_policy
from tests.support.remote import enqueue_all, work
from tests.support.stats_sink import RecordingSink
from tests.support.tables import count, create_media_table


@pytest.fixture
def sink(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingSink]:
    monkeypatch.delenv(metrics.NAMES_VARIABLE, raising=False)
    before = metrics.installed()
    recording = RecordingSink()
    metrics.install(recording)
    yield recording
    metrics.install(before)


def summary(db: Connection, name: str) -> dict[str, object]:
    """What reconcile's summary gives the gauges: the cutoff and the rows left before it."""
    left = count(db, f"SELECT count(*) FROM public.{name} WHERE created_at < %s", CUTOFF)  # noqa: S608
    return {"cutoff": CUTOFF.isoformat(), "rows_remaining": left}


def test_gauges_and_counters_match_the_ledger_the_outbox_and_the_api(
    db: Connection, test_dsn: str, unique_name: str, sandbox, sink: RecordingSink
) -> None:
    notify = {"http_conn_id": "events_receiver", "endpoint": "/hooks/retention"}
    policy = remote_policy(unique_name, notify=notify, max_attempts=1)
    create_media_table(db, unique_name, 40, old_age=dt.timedelta(days=3))
    sandbox.state.configure(reject=["obj-3", "obj-4"])
    enqueue_all(db, policy)
    work(test_dsn, policy, sandbox)
    db.execute(  # one event given up on, as a receiver that keeps failing would leave it
        "UPDATE retention.outbox SET state = 'dead' WHERE event_id = "
        "(SELECT min(event_id) FROM retention.outbox WHERE policy = %s)",
        (unique_name,),
    )

    metrics.emit_run_gauges(db, policy, summary(db, unique_name))

    mine = f"retention.{unique_name}"
    confirmed = [r for r in sandbox.state.stats()["requests"] if 200 <= r["status"] < 300]
    assert len(confirmed) == 38
    assert sink.values(f"{mine}.remote.requests.operations.confirmed") == [1] * 38
    assert sink.values(f"{mine}.remote.requests.operations.rejected") == [1, 1]
    assert sum(sink.values(f"{mine}.rows_deleted")) == 38
    ops = {
        r["state"]: r["n"]
        for r in db.execute(
            "SELECT state, count(*) AS n FROM retention.operations WHERE policy = %s GROUP BY 1",
            (unique_name,),
        )
    }
    assert ops == {"done": 38, "dead": 2}
    assert sink.last(f"{mine}.operations.dead") == 2
    assert sink.last(f"{mine}.operations.pending") == 0
    assert sink.last(f"{mine}.operations.in_flight") == 0
    assert sink.last(f"{mine}.dead_letters.operations") == 2
    assert sink.last(f"{mine}.dead_letters.events") == 1
    assert sink.last(f"{mine}.events.pending") == 37, "38 events, one of them dead"
    assert sink.last(f"{mine}.rows_remaining") == 2
    age = sink.last(f"{mine}.oldest_eligible_age_seconds")
    expected = (dt.datetime.now(dt.UTC) - (CUTOFF - dt.timedelta(days=3))).total_seconds()
    assert expected - 60 < age <= expected, "the two dead rows' age, 3 days past the cutoff"
    tagged = [tags for _, stat, _, tags in sink.sent if stat == "retention.operations"]
    assert {"policy": unique_name, "state": "dead"} in tagged


def test_a_row_policy_sends_no_queue_gauges(
    db: Connection, unique_name: str, sink: RecordingSink
) -> None:
    create_media_table(db, unique_name, 5)
    policy = make_policy(unique_name)
    metrics.emit_run_gauges(db, policy, summary(db, unique_name))
    names = {stat for _, stat, _, _ in sink.sent}
    assert names == {
        "retention.rows_remaining",
        f"retention.{unique_name}.rows_remaining",
        "retention.oldest_eligible_age_seconds",
        f"retention.{unique_name}.oldest_eligible_age_seconds",
        "retention.held",
        f"retention.{unique_name}.held.rows",
    }
    assert sink.last(f"retention.{unique_name}.rows_remaining") == 5
    assert sink.last(f"retention.{unique_name}.held.rows") == 0


def test_a_failing_gauge_query_is_logged_and_never_raised(
    db: Connection, unique_name: str, sink: RecordingSink, caplog: pytest.LogCaptureFixture
) -> None:
    policy = make_policy(unique_name)  # its table public.<name> does not exist
    with caplog.at_level(logging.WARNING, logger="retention.metrics"):
        metrics.emit_run_gauges(db, policy, {"cutoff": CUTOFF.isoformat(), "rows_remaining": 0})
    assert [r.getMessage() for r in caplog.records] == [
        f"policy {unique_name}: metrics: reconcile gauges skipped (UndefinedTable: relation "
        f'"public.{unique_name}" does not exist); the run is unaffected'
    ]
    assert sink.values(f"retention.{unique_name}.oldest_eligible_age_seconds") == []
    assert db.execute("SELECT 1 AS ok").fetchone() == {"ok": 1}, "the connection still works"
