"""The gate between batches (pure): health verdicts, the pause switch, waiting and its totals."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from retention.db.gate import Gate, HealthAbort, PausedTooLong, switch_pauses
from retention.db.health import HealthReading, judge, sleep_ratio
from retention.policy.model import HealthSpec, TableSpec

TABLE = TableSpec("public", "events", "id", "created_at", None)
CONN: Any = object()  # the fake reader never touches it
GIB = 1024**3


@pytest.mark.parametrize(
    ("value", "policy", "paused"),
    [
        (None, "p", False),
        ("", "p", False),
        ("all", "p", True),
        ("ALL", "p", True),
        ("p", "p", True),
        ("a, p ,b", "p", True),
        ("a,b", "p", False),
        ("pp", "p", False),
        ("P", "p", False),
    ],
)
def test_the_switch_names_all_or_a_list_of_policies(value: str, policy: str, paused: bool) -> None:
    assert switch_pauses(value, policy) is paused


@pytest.mark.parametrize(
    ("reading", "spec", "kind", "abort", "words"),
    [
        (HealthReading(), HealthSpec(), None, False, None),
        (
            HealthReading(replica_lag_seconds=31),
            HealthSpec(),
            "replica_lag",
            False,
            "a standby replays 31 s behind (limit 30)",
        ),
        (
            HealthReading(replica_lag_seconds=601),
            HealthSpec(),
            "replica_lag",
            True,
            "a standby replays 601 s behind (abort limit 600)",
        ),
        (
            HealthReading(oldest_xact_pid=81234, oldest_xact_seconds=1240),
            HealthSpec(),
            "xact_age",
            False,
            "transaction 81234 open for 1,240 s holds back vacuum (limit 600)",
        ),
        (
            HealthReading(oldest_xact_pid=7, oldest_xact_seconds=1240),
            HealthSpec(max_xact_age_seconds=None),
            None,
            False,
            None,
        ),
        (
            HealthReading(blocked_sessions=1),
            HealthSpec(),
            "blocked_sessions",
            False,
            "1 session(s) wait on locks held by retention sessions (limit 0)",
        ),
        (
            HealthReading(blocked_sessions=3),
            HealthSpec(abort_blocked_sessions=2),
            "blocked_sessions",
            True,
            "3 session(s) wait on locks held by retention sessions (abort limit 2)",
        ),
        (HealthReading(autovacuum_pid=55), HealthSpec(), None, False, None),
        # replay_lag is NULL once a standby has caught up and goes stale while replay is
        # stalled; the bytes of WAL between the primary and the standby's replay are not
        (
            HealthReading(replica_lag_seconds=None, replica_lag_bytes=5 * GIB),
            HealthSpec(max_replica_lag_bytes=GIB),
            "replica_lag",
            False,
            "a standby replays 5.0 GiB of WAL behind (limit 1.0 GiB)",
        ),
        (
            HealthReading(replica_lag_seconds=2, replica_lag_bytes=5 * GIB),
            HealthSpec(max_replica_lag_bytes=GIB),
            "replica_lag",
            False,
            "a standby replays 5.0 GiB of WAL behind (limit 1.0 GiB)",
        ),
        (
            HealthReading(replica_lag_seconds=None, replica_lag_bytes=5 * GIB),
            HealthSpec(max_replica_lag_bytes=GIB, abort_replica_lag_bytes=4 * GIB),
            "replica_lag",
            True,
            "a standby replays 5.0 GiB of WAL behind (abort limit 4.0 GiB)",
        ),
        (
            HealthReading(replica_lag_seconds=None, replica_lag_bytes=3 * 1024**2 // 2),
            HealthSpec(max_replica_lag_bytes=1024**2),
            "replica_lag",
            False,
            "a standby replays 1.5 MiB of WAL behind (limit 1.0 MiB)",
        ),
        (
            HealthReading(replica_lag_seconds=None, replica_lag_bytes=0),
            HealthSpec(max_replica_lag_bytes=GIB),
            None,
            False,
            None,
        ),
        (  # no standby reports a position: nothing to measure
            HealthReading(replica_lag_seconds=None, replica_lag_bytes=None),
            HealthSpec(max_replica_lag_bytes=GIB),
            None,
            False,
            None,
        ),
        (  # the defaults do not read bytes (today's behaviour)
            HealthReading(replica_lag_seconds=None, replica_lag_bytes=500 * GIB),
            HealthSpec(),
            None,
            False,
            None,
        ),
        (  # a standby that disconnected leaves no lag reading at all
            HealthReading(standbys=0),
            HealthSpec(expected_standbys=1),
            "standby_missing",
            False,
            "standby missing: 0 of 1 expected standby(s) connected",
        ),
        (
            HealthReading(standbys=1, replica_lag_seconds=None, replica_lag_bytes=0),
            HealthSpec(expected_standbys=2, max_replica_lag_bytes=GIB),
            "standby_missing",
            False,
            "standby missing: 1 of 2 expected standby(s) connected",
        ),
        (HealthReading(standbys=2), HealthSpec(expected_standbys=2), None, False, None),
        (HealthReading(standbys=0), HealthSpec(expected_standbys=0), None, False, None),
        (  # an abort threshold comes before any pause
            HealthReading(standbys=0, replica_lag_seconds=700),
            HealthSpec(expected_standbys=1),
            "replica_lag",
            True,
            "a standby replays 700 s behind (abort limit 600)",
        ),
        (
            HealthReading(autovacuum_pid=55),
            HealthSpec(pause_on_autovacuum=True),
            "autovacuum",
            False,
            "a vacuum (pid 55) is working on public.events",
        ),
    ],
)
def test_judge(
    reading: HealthReading, spec: HealthSpec, kind: str | None, abort: bool, words: str | None
) -> None:
    verdict = judge(reading, spec, "public.events")
    assert (verdict.kind, verdict.abort, verdict.reason) == (kind, abort, words)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def readings(*values: HealthReading) -> Iterator[HealthReading]:
    yield from values
    while True:
        yield HealthReading()


def gate_with(
    clock: Clock, spec: HealthSpec, *values: HealthReading, switch: Any = None
) -> tuple[Gate, list[int]]:
    source = readings(*values)
    looks: list[int] = []

    def reader(conn: object, table: TableSpec) -> HealthReading:
        looks.append(1)
        return next(source)

    gate = Gate(
        "p", spec, TABLE, switch, clock=clock, sleep=clock.sleep, reader=reader, check_every=1.0
    )
    return gate, looks


def test_a_pause_waits_until_clear_logs_once_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    lag = HealthReading(replica_lag_seconds=45)
    gate, looks = gate_with(clock, HealthSpec(), lag, lag, lag)
    with caplog.at_level(logging.INFO, logger="retention.db.gate"):
        assert gate.wait(CONN) is True
    assert clock.now == 3.0
    assert len(looks) == 4
    assert gate.totals() == {
        "pauses": 1,
        "paused_seconds": 3.0,
        "pause_reasons": {"replica_lag": 3.0},
        "paced_seconds": 0.0,
    }
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "policy p: paused: a standby replays 45 s behind (limit 30)",
        "policy p: resumed after 3.0 s paused",
    ]


def test_the_gate_looks_at_most_once_per_interval() -> None:
    clock = Clock()
    gate, looks = gate_with(clock, HealthSpec())
    for _ in range(5):
        gate.wait(CONN)
    assert len(looks) == 1
    clock.now += 1.0
    gate.wait(CONN)
    assert len(looks) == 2


def test_a_pause_past_its_limit_fails_with_the_reason() -> None:
    clock = Clock()
    old = HealthReading(oldest_xact_pid=81234, oldest_xact_seconds=1240)
    gate, _ = gate_with(clock, HealthSpec(max_pause_seconds=5), *[old] * 20)
    with pytest.raises(PausedTooLong) as failed:
        gate.wait(CONN)
    assert str(failed.value) == (
        "policy 'p': paused 5.0 s: transaction 81234 open for 1,240 s holds back vacuum "
        "(limit 600). Nothing was lost; a retry resumes where this stopped."
    )
    assert gate.totals()["pause_reasons"] == {"xact_age": 5.0}


def test_an_abort_threshold_fails_at_once() -> None:
    clock = Clock()
    gate, _ = gate_with(clock, HealthSpec(), HealthReading(replica_lag_seconds=700))
    with pytest.raises(HealthAbort, match=r"stopped: a standby replays 700 s behind"):
        gate.wait(CONN)
    assert clock.slept == []


def test_a_pause_ends_at_the_deadline_of_a_bounded_pass() -> None:
    clock = Clock()
    lag = HealthReading(replica_lag_seconds=45)
    gate, _ = gate_with(clock, HealthSpec(), *[lag] * 20)
    assert gate.wait(CONN, until=2.5) is False
    assert clock.now == 3.0
    assert gate.totals()["pauses"] == 1


def test_the_switch_pauses_and_an_unreadable_switch_keeps_its_last_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    values: list[Any] = ["p", "p", RuntimeError("api down"), RuntimeError("api down"), ""]

    def switch() -> str | None:
        value = values.pop(0) if values else ""
        if isinstance(value, Exception):
            raise value
        return value

    gate, looks = gate_with(clock, HealthSpec(), switch=switch)
    with caplog.at_level(logging.WARNING, logger="retention.db.gate"):
        assert gate.wait(CONN) is True
    assert clock.now == 4.0, "paused while the switch said p and while it could not be read"
    assert len(looks) == 1, "the database is only read once the switch is clear"
    assert gate.totals()["pause_reasons"] == {"retention_pause": 4.0}
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "policy p: paused by retention_pause",
        "policy p: could not read the Variable retention_pause (api down); keeping its last "
        "value 'p'",
    ]


def test_pacing_sleeps_a_share_of_each_batch() -> None:
    clock = Clock()
    gate, _ = gate_with(clock, HealthSpec(sleep_ratio=0.5))
    gate.pace(0.2)
    gate.pace(0.0)
    assert clock.slept == [0.1]
    assert gate.totals()["paced_seconds"] == 0.1
    assert gate.totals()["paused_seconds"] == 0.1, "paced time is not working time"
    assert gate.totals()["pause_reasons"] == {"paced": 0.1}
    assert gate.totals()["pauses"] == 0, "pacing is not a pause"


@pytest.mark.parametrize(
    ("spec", "active_clients", "expected"),
    [
        (HealthSpec(), 0, 0.0),
        (HealthSpec(), 1, 1.0),
        (HealthSpec(sleep_ratio=0.5, busy_sleep_ratio=2.0), 0, 0.5),
        (HealthSpec(sleep_ratio=0.5, busy_sleep_ratio=2.0), 3, 2.0),
        (HealthSpec(sleep_ratio=3.0, busy_sleep_ratio=2.0), 3, 3.0),
        (HealthSpec(busy_sleep_ratio=0), 5, 0.0),
    ],
)
def test_the_sleep_ratio_rises_while_other_clients_work(
    spec: HealthSpec, active_clients: int, expected: float
) -> None:
    assert sleep_ratio(HealthReading(active_clients=active_clients), spec) == expected


@pytest.mark.parametrize(
    ("spec", "reading", "expected"),
    [
        # busy_clients: pace only when at least that many other sessions are at work
        (HealthSpec(busy_clients=3), HealthReading(active_clients=2), 0.0),
        (HealthSpec(busy_clients=3), HealthReading(active_clients=3), 1.0),
        # ignore_applications: a monitoring agent's or a pool's sessions never count
        (
            HealthSpec(ignore_applications=["pgwatch"]),
            HealthReading(active_clients=2, active_applications={"pgwatch": 2}),
            0.0,
        ),
        (
            HealthSpec(ignore_applications=["pgwatch"]),
            HealthReading(active_clients=2, active_applications={"pgwatch": 1, "shop": 1}),
            1.0,
        ),
        (
            HealthSpec(ignore_applications=["pgwatch", "pgbouncer"], busy_clients=2),
            HealthReading(
                active_clients=7, active_applications={"pgwatch": 5, "pgbouncer": 1, "shop": 1}
            ),
            0.0,
        ),
        (
            HealthSpec(ignore_applications=["pgwatch"], busy_clients=2),
            HealthReading(active_clients=3, active_applications={"pgwatch": 1, "shop": 2}),
            1.0,
        ),
        (  # names match exactly
            HealthSpec(ignore_applications=["pgwatch"]),
            HealthReading(active_clients=1, active_applications={"pgwatch2": 1}),
            1.0,
        ),
        (  # "" names the sessions that set no application_name (a pool's keep-alives)
            HealthSpec(ignore_applications=[""]),
            HealthReading(active_clients=3, active_applications={"": 3}),
            0.0,
        ),
    ],
)
def test_busy_pacing_counts_only_the_clients_that_matter(
    spec: HealthSpec, reading: HealthReading, expected: float
) -> None:
    assert sleep_ratio(reading, spec) == expected


def test_pacing_follows_the_last_look_at_other_clients() -> None:
    clock = Clock()
    gate, looks = gate_with(
        clock,
        HealthSpec(busy_sleep_ratio=1.0),
        HealthReading(active_clients=2),
        HealthReading(active_clients=0),
    )
    gate.pace(0.2)
    assert clock.slept == [], "no look yet: nothing known of other clients"
    assert gate.wait(conn=None)  # type: ignore[arg-type]
    gate.pace(0.2)
    assert clock.slept == [0.2], "busy: sleep as long as the batch took"
    clock.now += 1.0
    assert gate.wait(conn=None)  # type: ignore[arg-type]
    gate.pace(0.2)
    assert clock.slept == [0.2], "quiet again: flat out"
    assert len(looks) == 2
