"""Rate limiting across workers, as counted by the sandbox API on loopback."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from retention.db.connection import connect_dsn
from retention.objects.deleter import work_operations
from retention.objects.enqueue import enqueue_window
from retention.objects.kind import OperationsKind
from retention.queue import limiter
from retention.queue.limiter import TokenBucket
from tests.support.policies import remote_policy
from tests.support.rates import (
    excess_over_bucket,
    max_in_any_interval,
    max_in_any_second,
    token_bucket_bound,
)
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

        def try_take(bucket: TokenBucket, wanted: int = 1) -> tuple[int, float]:
            began = time.time()
            granted, wait = real_take(bucket, wanted)
            with log.lock:
                log.takes.append((began, time.time(), granted > 0))
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
    # 10 operations a claim: all three workers hold some of the 40 and call at once
    policy = prepare(db, unique_name, 40, rate_per_second=15, burst=3, claim_batch=10)
    # Each 429 closes the scope for 1 s and halves the rate, so the calls of a storm
    # come 1.1, 1.3, 1.5 s apart: 6 s holds the 4 asked for below with 2 s to spare.
    sandbox.state.configure(rate=8, burst=8, storm_seconds=6)
    run_workers(test_dsn, policy, sandbox, workers=3, limit_seconds=60)
    stats = sandbox.state.stats()
    assert stats["throttled"] >= 4, "a storm of 429s, then a real limit below the configured rate"
    times = [r["t"] for r in stats["requests"]]
    assert max_in_any_second(times) <= 15 + 3, "rate_per_second + burst, in every second"
    assert limiter.throttles, "every 429 closes the scope"
    first_rate = limiter.throttles[0][3]
    assert first_rate <= 15 / 2 + 0.5, f"the first 429 halved the effective rate: {first_rate}"
    assert limiter.grants_inside_a_closed_scope() == [], "no grant in a Retry-After window"
    assert (
        count(
            db,
            "SELECT count(*) FROM retention.operations WHERE policy = %s AND state = 'done'",
            policy.name,
        )
        == 40
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


class FakeClock:
    """A clock the test moves by hand, so hold times never depend on the machine's speed."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def granted_total(db, scope: str) -> int:
    return count(db, "SELECT granted_total FROM retention.rate_limiters WHERE scope = %s", scope)


def bucket_for(db, unique_name: str, rate: float, burst: int) -> tuple[TokenBucket, FakeClock]:
    remote = remote_policy(unique_name, rate_per_second=rate, burst=burst).remote
    clock = FakeClock()
    bucket = TokenBucket.for_remote(db, remote)
    bucket.clock = clock
    bucket.sleep = lambda seconds: setattr(clock, "now", clock.now + seconds)
    return bucket, clock


def test_take_tokens_grants_what_the_bucket_holds_and_no_more(db, unique_name):
    bucket, _ = bucket_for(db, unique_name, rate=1, burst=7)
    assert bucket.try_take(50)[0] == 7, "a full bucket of 7 grants 7 of 50 wanted"
    granted, wait = bucket.try_take(50)
    assert granted == 0, "an empty bucket grants none"
    assert 0 < wait <= 1.0, "and says how long to wait for one"
    assert granted_total(db, bucket.scope) == 7
    db.execute(
        "UPDATE retention.rate_limiters SET tokens = 2.9, updated_at = clock_timestamp() "
        "WHERE scope = %s",
        (bucket.scope,),
    )
    assert bucket.try_take(50)[0] == 2, "whole tokens only"
    left = db.execute(
        "SELECT tokens FROM retention.rate_limiters WHERE scope = %s", (bucket.scope,)
    ).fetchone()["tokens"]
    assert 0.9 <= left < 1.0, "the fraction stays in the bucket"


def test_take_tokens_refuses_nonsense_and_grants_nothing_in_a_closed_scope(db, unique_name):
    bucket, _ = bucket_for(db, unique_name, rate=10, burst=10)
    for wanted in (0, None):
        with pytest.raises(psycopg.errors.RaiseException, match="at least one token"):
            bucket.try_take(wanted)  # type: ignore[arg-type]
    bucket.throttle(30)
    before = db.execute(
        "SELECT tokens, granted_total FROM retention.rate_limiters WHERE scope = %s",
        (bucket.scope,),
    ).fetchone()
    granted, wait = bucket.try_take(5)
    assert granted == 0
    assert 25 < wait <= 30, "closed until the Retry-After ends"
    after = db.execute(
        "SELECT tokens, granted_total FROM retention.rate_limiters WHERE scope = %s",
        (bucket.scope,),
    ).fetchone()
    assert after == before, "a closed scope writes nothing"
    one = db.execute("SELECT * FROM retention.take_token(%s)", (bucket.scope,)).fetchone()
    assert one["granted"] is False, "the one-token function is the same bucket"


def test_a_fast_worker_takes_ahead_only_what_it_uses_within_the_hold(db, unique_name):
    bucket, clock = bucket_for(db, unique_name, rate=10_000, burst=10_000)
    assert bucket.acquire(clock() + 5, upcoming=50)
    assert granted_total(db, bucket.scope) == 1, "no pace measured yet: one token"
    clock.now += 0.0021  # this worker calls every 2.1 ms
    assert bucket.acquire(clock() + 5, upcoming=49)
    assert granted_total(db, bucket.scope) == 1 + 23, "50 ms at 2.1 ms a call: 23 tokens"
    for _ in range(20):
        clock.now += 0.001
        assert bucket.acquire(clock() + 5, upcoming=40)
    assert granted_total(db, bucket.scope) == 24, "held tokens served 20 calls"
    assert bucket.held == 2
    clock.now += limiter.HOLD_SECONDS
    assert bucket.acquire(clock() + 5, upcoming=1)
    assert granted_total(db, bucket.scope) == 25, "tokens past their hold are not used"
    assert bucket.tokens_dropped == 2
    assert (bucket.takes, bucket.tokens_taken, bucket.largest_take) == (3, 25, 23)


def test_a_slow_scope_takes_one_token_at_a_time(db, unique_name):
    bucket, clock = bucket_for(db, unique_name, rate=20, burst=20)
    for _ in range(10):
        clock.now += 0.001
        assert bucket.acquire(clock() + 5, upcoming=50)
    assert (bucket.takes, bucket.largest_take) == (10, 1), "20/s earns one token in 50 ms"


def busy_for(db, scope: str, seconds: float, grants: int) -> None:
    """The scope has been busy ``seconds``, and granted ``grants`` tokens meanwhile."""
    db.execute(
        "UPDATE retention.rate_limiters SET busy_since = clock_timestamp() - %s * interval "
        "'1 second', granted_total = granted_total + %s, granted_before_busy = granted_total "
        "WHERE scope = %s",
        (seconds, grants, scope),
    )


def limiter_row(db, scope: str) -> dict:
    return db.execute(
        "SELECT effective_rate, admitted_rate, tokens FROM retention.rate_limiters "
        "WHERE scope = %s",
        (scope,),
    ).fetchone()


@pytest.mark.parametrize(
    ("seconds", "grants", "expected", "admitted", "why"),
    [
        (10, 20 + 1 + 600, 60.0, 60.0, "the API admitted 60/s beyond its burst: 60/s"),
        (10, 20 + 1 + 990, 99.0, 99.0, "a 429 at the API's own limit costs 1%, not half"),
        (10, 20 + 1 + 3000, 100.0, 100.0, "it admitted more than was sent: no decrease"),
        (10, 20 + 1 + 300, 50.0, None, "30/s is under half the rate: halve, learn nothing"),
        (0.1, 20 + 1 + 9, 50.0, None, "under half a burst beyond the burst: halve"),
    ],
)
def test_a_429_lowers_the_rate_to_what_the_api_admitted_or_halves_it(
    db, unique_name, seconds, grants, expected, admitted, why
):
    bucket, _ = bucket_for(db, unique_name, rate=100, burst=20)
    busy_for(db, bucket.scope, seconds, grants)
    assert bucket.throttle(1.0) == pytest.approx(expected, rel=0.02), why
    row = limiter_row(db, bucket.scope)
    if admitted is None:
        assert row["admitted_rate"] is None, why
    else:
        assert row["admitted_rate"] == pytest.approx(admitted, rel=0.02), why
    busy_for(db, bucket.scope, seconds, grants)
    assert bucket.throttle(1.0) == pytest.approx(expected, rel=0.02), "a second 429 at once: one"


@pytest.mark.parametrize(
    ("admitted", "expected", "why"),
    [
        (None, 30 + 25, "nothing learned: back at rate / recovery_seconds a second"),
        (70, 30 + 25, "below what the API admitted: the same"),
        (50, 50 + 5 / 4, "above it: four times more slowly"),
        (20, 30 + 25 / 4, "already above it: four times more slowly throughout"),
    ],
)
def test_the_rate_climbs_back_to_what_the_api_admitted_then_slower(
    db, unique_name, admitted, expected, why
):
    """100/s, recovery over 60 s: 15 s after a decrease to 30/s the rate has climbed 25/s."""
    bucket, _ = bucket_for(db, unique_name, rate=100, burst=20)
    db.execute(
        "UPDATE retention.rate_limiters SET effective_rate = 30, admitted_rate = %s, "
        "updated_at = clock_timestamp() - interval '15 seconds' WHERE scope = %s",
        (admitted, bucket.scope),
    )
    bucket.try_take(1)
    assert bucket.effective_rate == pytest.approx(expected, abs=0.1), why


def test_the_bucket_keeps_the_take_ahead_reserve_out_of_reach(db, unique_name):
    """100/s with a burst of 20 holds tokens 50 ms: 5 tokens of reserve, 15 at once."""
    bucket, _ = bucket_for(db, unique_name, rate=100, burst=20)
    assert bucket.hold == pytest.approx(0.05)
    assert bucket.try_take(50)[0] == 15, "a new scope's bucket holds the burst less the reserve"
    db.execute(
        "UPDATE retention.rate_limiters SET updated_at = clock_timestamp() - interval '1 hour' "
        "WHERE scope = %s",
        (bucket.scope,),
    )
    assert bucket.try_take(50)[0] == 15, "however long it idles"


def test_a_throttle_drops_the_tokens_held(db, unique_name):
    bucket, clock = bucket_for(db, unique_name, rate=10_000, burst=10_000)
    bucket.acquire(clock() + 5, upcoming=50)
    clock.now += 0.001
    bucket.acquire(clock() + 5, upcoming=49)
    assert bucket.held > 0
    held = bucket.held
    bucket.throttle(30)
    assert bucket.held == 0
    assert bucket.tokens_dropped == held
    assert not bucket.acquire(clock() + 1, upcoming=48), "the scope is closed for 30 s"


def test_fast_workers_taking_ahead_stay_within_the_bound_at_the_api(
    db, unique_name, sandbox, test_dsn, monkeypatch
):
    """Counted at the sandbox, where a call lands a little after the worker starts it: in
    every interval, calls <= rate x (interval + 50 ms) + burst, the 50 ms for delivery on a
    loaded machine (the bound without it, timed where the calls start, is the next test's).
    """
    rate, burst = 400, 40  # a hold of 50 ms: takes of up to 20 tokens
    policy = prepare(db, unique_name, 1200, rate_per_second=rate, burst=burst, claim_batch=50)
    statements: list[int] = []
    real_take = TokenBucket.try_take

    def counted(bucket: TokenBucket, wanted: int = 1) -> tuple[int, float]:
        granted, wait = real_take(bucket, wanted)
        if granted:
            statements.append(granted)
        return granted, wait

    monkeypatch.setattr(TokenBucket, "try_take", counted)
    started = time.monotonic()
    run_workers(test_dsn, policy, sandbox, workers=3, limit_seconds=60)
    elapsed = time.monotonic() - started
    times = sorted(r["t"] for r in sandbox.state.stats()["requests"])
    assert len(times) == 1200
    assert elapsed >= (1200 - burst) / rate, "the limiter, not the workers, set the pace"
    assert sum(statements) >= 1200
    assert len(statements) < 1200, f"tokens taken ahead: {max(statements)} at most at once"
    for width in (0.05, 0.25, 1.0):
        allowed = token_bucket_bound(rate, burst, width, late=0.05)
        assert max_in_any_interval(times, width) <= allowed, f"{width} s windows"


def test_four_workers_stay_within_rate_times_interval_plus_burst_in_every_interval(
    db, test_dsn, unique_name, monkeypatch
):
    """Calls, timed when each worker starts them, stay within ``rate × t + burst`` for every
    interval ``t`` (every pair of calls), the bound of an API with the same rate and burst.

    Four workers, each on its own connection, in rounds built to find the worst interval:
    the scope idles until its bucket is full; one worker calls twice in quick succession
    (so it takes tokens ahead), then stops short of its hold while the bucket refills
    behind the tokens it keeps; then all four call as fast as they can (that worker on the
    tokens it kept) until the bucket has been empty a while. The hold is stretched to a
    quarter of a second, and the rate lowered to match, so that a statement's few
    milliseconds on a loaded machine are small beside it; the bound does not depend on the
    hold's length. One call of slack: a thread may be paused between its token and the
    moment it notes the call.
    """
    monkeypatch.setattr(limiter, "HOLD_SECONDS", 0.25)
    rate, burst, rounds = 80.0, 40, 3
    remote = remote_policy(unique_name, rate_per_second=rate, burst=burst).remote
    calls: list[float] = []
    taken_ahead: list[int] = []
    lock = threading.Lock()
    together = threading.Barrier(4)
    errors: list[BaseException] = []

    def call(bucket: TokenBucket) -> None:
        assert bucket.acquire(time.monotonic() + 5, upcoming=100)
        with lock:
            calls.append(time.monotonic())

    def worker(index: int) -> None:
        try:
            with connect_dsn(test_dsn) as conn:
                for _ in range(rounds):
                    bucket = TokenBucket.for_remote(conn, remote)  # a new pass: no pace yet
                    together.wait()
                    time.sleep(burst / rate)  # idle: the bucket fills
                    if index == 0:
                        call(bucket)
                        call(bucket)  # its pace measured: this take takes ahead
                        taken_ahead.append(bucket.largest_take)
                        time.sleep(0.8 * limiter.HOLD_SECONDS)  # the bucket refills behind
                    together.wait()
                    until = time.monotonic() + burst / rate / 2
                    while time.monotonic() < until:  # all four, worker 0 on what it kept
                        call(bucket)
        except BaseException as exc:  # surfaced below
            together.abort()
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert max(taken_ahead) > 1, "the take-ahead was exercised"
    excess = excess_over_bucket(calls, rate, burst)
    assert excess <= 1, f"{excess:.1f} calls over rate × interval + burst in the worst interval"
