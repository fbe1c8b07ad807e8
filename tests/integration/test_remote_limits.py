"""Rate limiting across workers, as counted by the sandbox API on loopback."""

from __future__ import annotations

import threading
import time

import pytest

from retention.db.connection import connect_dsn
from retention.objects.deleter import work_operations
from retention.objects.operations import OperationsKind, enqueue_window
from retention.queue.limiter import TokenBucket
from tests.support.policies import remote_policy
from tests.support.remote import sandbox_sender
from tests.support.tables import count, create_media_table, plan


def run_workers(test_dsn: str, policy, sandbox, workers: int, limit_seconds: float) -> None:
    """``workers`` threads, each its own connection and session, until no work is left."""
    deadline = time.monotonic() + limit_seconds
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            with connect_dsn(test_dsn) as conn:
                client = sandbox_sender(sandbox)
                while time.monotonic() < deadline:
                    left = count(
                        conn,
                        "SELECT count(*) FROM retention.operations "
                        "WHERE policy = %s AND state IN ('pending', 'in_flight')",
                        policy.name,
                    )
                    if not left:
                        return
                    work_operations(conn, OperationsKind(policy, client), budget_seconds=2)
                    time.sleep(0.02)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=loop) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def prepare(db, name: str, rows: int, **remote) -> object:
    create_media_table(db, name, rows)
    policy = remote_policy(name, **remote)
    for window in plan(db, policy):
        enqueue_window(db, policy, window, 500)
    return policy


def max_in_any_second(times: list[float]) -> int:
    times = sorted(times)
    best, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= 1.0:
            start += 1
        best = max(best, end - start + 1)
    return best


class LimiterLog:
    """Records, on this process's clock, every token taken and every throttle of a scope.

    The workers are threads of this process, so one clock orders everything:
    a take that began after a throttle had committed must not be granted
    before the scope reopens. No wall-clock margins are needed.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.takes: list[tuple[float, float, bool]] = []
        self.throttles: list[tuple[float, float, float, float]] = []
        self.lock = threading.Lock()
        real_take, real_throttle = TokenBucket.try_take, TokenBucket.throttle
        log = self

        def try_take(bucket: TokenBucket) -> tuple[bool, float]:
            began = time.time()
            granted, wait = real_take(bucket)
            with log.lock:
                log.takes.append((began, time.time(), granted))
            return granted, wait

        def throttle(bucket: TokenBucket, seconds: float) -> float:
            began = time.time()
            rate = real_throttle(bucket, seconds)
            with log.lock:
                log.throttles.append((began, time.time(), seconds, rate))
            return rate

        monkeypatch.setattr(TokenBucket, "try_take", try_take)
        monkeypatch.setattr(TokenBucket, "throttle", throttle)

    def grants_inside_a_closed_scope(self) -> list[tuple[float, float]]:
        """Grants whose request began after a throttle committed and ended before it reopened."""
        return [
            (take_began, closed_at + seconds)
            for closed_began, closed_at, seconds, _ in self.throttles
            for take_began, take_ended, granted in self.takes
            if granted and take_began > closed_at and take_ended < closed_began + seconds
        ]


def test_three_workers_in_a_429_storm_stay_within_the_limit(
    db, unique_name, sandbox, test_dsn, monkeypatch
):
    limiter = LimiterLog(monkeypatch)
    policy = prepare(db, unique_name, 60, rate_per_second=15, burst=3)
    sandbox.state.configure(rate=8, burst=8, storm_seconds=4)
    run_workers(test_dsn, policy, sandbox, workers=3, limit_seconds=60)
    stats = sandbox.state.stats()
    assert stats["throttled"] >= 4, "a storm of 429s, then a real limit below the configured rate"
    times = [r["t"] for r in stats["requests"]]
    assert max_in_any_second(times) <= 15 + 3, "rate_per_second + burst, in every second"
    assert limiter.throttles, "every 429 closes the scope"
    first_rate = limiter.throttles[0][3]
    assert first_rate <= 15 / 2 + 0.5, f"the first 429 halved the effective rate: {first_rate}"
    assert limiter.grants_inside_a_closed_scope() == [], "no call inside a Retry-After window"
    assert (
        count(
            db,
            "SELECT count(*) FROM retention.operations WHERE policy = %s AND state = 'done'",
            policy.name,
        )
        == 60
    )
    assert set(stats["effects"].values()) == {1}


def test_retry_after_is_honoured_by_the_whole_scope(
    db, unique_name, sandbox, test_dsn, monkeypatch
):
    limiter = LimiterLog(monkeypatch)
    sandbox.state.configure(rate=2, burst=1)
    policy = prepare(db, unique_name, 8, rate_per_second=50, burst=10)
    run_workers(test_dsn, policy, sandbox, workers=3, limit_seconds=60)
    throttled = [r for r in sandbox.state.stats()["requests"] if r["status"] == 429]
    assert throttled
    assert len(limiter.throttles) == len(throttled), "each 429 closed the scope"
    assert limiter.grants_inside_a_closed_scope() == []
    rates = [rate for _, _, _, rate in limiter.throttles]
    assert min(rates) < 50 / 2, "the scope learned a lower rate"


def test_api_limit_at_half_the_configured_rate_gets_few_429s(db, unique_name, sandbox, test_dsn):
    sandbox.state.configure(rate=25, burst=25)
    policy = prepare(db, unique_name, 250, rate_per_second=50, burst=5)
    started = time.monotonic()
    run_workers(test_dsn, policy, sandbox, workers=3, limit_seconds=90)
    elapsed = time.monotonic() - started
    stats = sandbox.state.stats()
    share = stats["throttled"] / len(stats["requests"])
    assert share < 0.05, f"{stats['throttled']} of {len(stats['requests'])} requests got 429"
    rate = db.execute(
        "SELECT effective_rate FROM retention.rate_limiters WHERE scope = %s",
        (policy.remote.scope,),
    ).fetchone()["effective_rate"]
    assert rate < 50, "the scope learned a rate below the configured ceiling"
    assert elapsed < 30
