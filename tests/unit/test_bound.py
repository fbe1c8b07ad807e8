"""What bounds a drain, as a table: the limiter, the pool's slots or the database, each at
its threshold; Little's law's slot number; the pool's busy share held between samples;
and a run's figures as the sum of its passes'."""

from __future__ import annotations

import pytest

from retention import metrics
from retention.policy import parse_policy
from retention.queue.bound import (
    HEADROOM,
    POOL_BUSY_SHARE,
    POOL_SAMPLE_SHARE,
    WAIT_SHARE,
    WORKING_SHARE,
    Bound,
    DrainSetting,
    PassTime,
    PoolReading,
    PoolWatch,
    judge,
    slots_for,
)
from tests.support.policies import REQUIRED_REMOTE, policy_fields

MEDIA = DrainSetting(pool="media_api", task_slots=1, rate_per_second=20)
UNREAD = (
    "no connection 'retention_airflow_api' (the api-server's URL, and a user who may read pools)"
)


def pass_of(
    *,
    seconds: float = 10.0,
    latency: float = 0.18,
    calling: float | None = None,
    limiter: float = 0.0,
    database: float = 0.0,
    idle: float = 0.0,
    pool_busy: float | None = 0.97,
    slots: int = 2,
    rate: float = 20.0,
) -> PassTime:
    """One worker's pass of ``seconds``: calling ``calling`` of it (by default, what the
    waits leave), at ``latency`` per call; the pool sampled all along, busy ``pool_busy``
    of it (None: not read)."""
    calling = seconds - limiter - database - idle if calling is None else calling
    calls = round(calling / latency)
    sampled = 0.0 if pool_busy is None else seconds
    return PassTime(
        seconds=seconds,
        calling=calls * latency,
        calls=calls,
        limiter=limiter,
        database=database,
        idle=idle,
        pool_sampled=sampled,
        pool_busy=sampled * (pool_busy or 0.0),
        pool_slot_seconds=sampled * slots,
        rate_seconds=rate * seconds,
        pool_unread=UNREAD if pool_busy is None else None,
    )


@pytest.mark.parametrize(
    ("figures", "verdict", "says"),
    [
        (
            pass_of(),
            Bound.CAPACITY,
            "capacity-bound: pool `media_api` has 2 slots, busy 97% of the time; at 180 ms "
            "per call, 20/s needs 5",
        ),
        (
            pass_of(limiter=6.4, rate=4.2),
            Bound.UPSTREAM,
            "upstream-bound: the limiter had no token or was closed 64% of the time; the API "
            "allows about 4.2/s (the limiter's effective rate; rate_per_second is 20/s): "
            "nothing to tune here",
        ),
        (
            pass_of(database=5.0, limiter=3.0),
            Bound.DATABASE,
            "database-bound: pauses and pacing took 50% of the time (the policy's health: "
            "limits or the pause switch; pause_reasons says which)",
        ),
        (
            pass_of(pool_busy=None),
            Bound.CAPACITY,
            "capacity-bound: workers were busy 100% of the time with the limiter open; at "
            f"180 ms per call, 20/s needs 5 slots in pool `media_api` (its own busy share is "
            f"unknown: {UNREAD})",
        ),
        (
            pass_of(pool_busy=0.6),
            Bound.UNBOUND,
            "not bound: pool `media_api` had a free slot 40% of the time and the limiter was "
            "open: the drain kept up with its work",
        ),
        (
            pass_of(idle=6.0, pool_busy=None),
            Bound.UNBOUND,
            "not bound: workers waited for work 60% of the time and the limiter was open: "
            "the drain kept up with its work",
        ),
        (
            pass_of(latency=0.048, slots=2),
            Bound.UNBOUND,
            "not bound: pool `media_api` has 2 slots, busy 97% of the time, and at 48 ms per "
            "call, 20/s needs 2: enough for the rate",
        ),
        (PassTime(), Bound.UNKNOWN, "unknown: no pass of the drain was measured"),
    ],
    ids=[
        "capacity",
        "upstream",
        "database",
        "capacity-pool-unread",
        "free-slots",
        "idle",
        "full-with-enough-slots",
        "none",
    ],
)
def test_the_verdict_names_what_bounds_the_drain_and_what_to_tune(
    figures: PassTime, verdict: Bound, says: str
) -> None:
    found = judge(figures, MEDIA)
    assert (found.verdict, found.says) == (verdict.value, says)
    assert found.slots_needed == (5 if verdict is Bound.CAPACITY else None)


@pytest.mark.parametrize(
    ("figures", "verdict"),
    [
        # a wait bounds the drain from WAIT_SHARE on, below it the pool decides
        (pass_of(limiter=10 * WAIT_SHARE), Bound.UPSTREAM),
        (pass_of(limiter=10 * WAIT_SHARE - 0.01), Bound.CAPACITY),
        (pass_of(database=10 * WAIT_SHARE), Bound.DATABASE),
        (pass_of(database=10 * WAIT_SHARE - 0.01), Bound.CAPACITY),
        # both waits at the threshold: the larger one (the limiter on a tie)
        (pass_of(limiter=3.0, database=3.0), Bound.UPSTREAM),
        (pass_of(limiter=2.5, database=3.0), Bound.DATABASE),
        # the pool is full from POOL_BUSY_SHARE on
        (pass_of(pool_busy=POOL_BUSY_SHARE), Bound.CAPACITY),
        (pass_of(pool_busy=POOL_BUSY_SHARE - 0.01), Bound.UNBOUND),
        # busy workers from WORKING_SHARE on, the pool full or unread
        (pass_of(idle=10 * (1 - WORKING_SHARE)), Bound.CAPACITY),
        (pass_of(idle=10 * (1 - WORKING_SHARE) + 0.01), Bound.UNBOUND),
        (pass_of(idle=10 * (1 - WORKING_SHARE) + 0.01, pool_busy=None), Bound.UNBOUND),
        # a pass that made no call is never short of slots
        (pass_of(calling=0.0), Bound.UNBOUND),
    ],
)
def test_each_threshold_is_where_the_verdict_turns(figures: PassTime, verdict: Bound) -> None:
    assert judge(figures, MEDIA).verdict == verdict.value


@pytest.mark.parametrize(
    ("rate", "latency", "task_slots", "slots"),
    [
        (20, 0.18, 1, 5),  # the figure: 4.32 → 5
        (20, 0.2, 1, 5),  # 4.8
        (20, 0.25, 1, 6),  # 6.0: exactly, not 7 for a float's last bit
        (10, 0.5, 1, 6),  # 6.0
        (20, 0.2, 2, 10),  # each task takes two slots
        (1, 0.01, 1, 1),  # never fewer than one
    ],
)
def test_littles_law_gives_the_slots(
    rate: float, latency: float, task_slots: int, slots: int
) -> None:
    assert slots_for(rate, latency, task_slots) == slots
    assert HEADROOM == 1.2


def test_the_run_weights_each_pass_by_its_time() -> None:
    """A long capacity-bound pass and a short upstream-bound one: the run is capacity-bound,
    and its limiter share is the time-weighted one."""
    long_pass, short_pass = pass_of(seconds=30.0), pass_of(seconds=10.0, limiter=8.0, rate=4)
    run = judge(long_pass + short_pass, MEDIA)
    assert (judge(short_pass, MEDIA).verdict, run.verdict) == ("upstream", "capacity")
    assert run.limiter_share == pytest.approx(8.0 / 40.0)
    assert run.effective_rate == pytest.approx((20 * 30 + 4 * 10) / 40)
    assert run.worker_seconds == 40.0


def test_the_figures_round_trip_and_a_text_keeps_the_newest() -> None:
    first, second = pass_of(), pass_of(pool_busy=None)
    assert PassTime.of(first.to_json()) == first
    assert (first + second).pool_unread == UNREAD
    assert (second + first).pool_unread == UNREAD, "a pass that read the pool says nothing"
    assert PassTime.of({"seconds": 2, "a_newer_figure": 1}) == PassTime(seconds=2.0)
    assert PassTime.of(None) == PassTime()


class Readings:
    """The pool's stats as a sequence of answers (or errors), and when they were asked."""

    def __init__(self, *answers: PoolReading | Exception) -> None:
        self.answers = list(answers)
        self.asked = 0

    def __call__(self, pool: str) -> PoolReading:
        self.asked += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_each_sample_of_the_pool_holds_until_the_next() -> None:
    read = Readings(PoolReading(2, 2), PoolReading(2, 1), PoolReading(2, 2))
    watch = PoolWatch("media_api", 1, read, every_seconds=1.0)
    for now in (0.0, 0.5, 1.0, 2.5):  # 0.5 is too soon after 0.0: not read
        watch.sample(now)
    figures = watch.close(3.0)
    assert read.asked == 3
    assert figures == {
        "pool_sampled": 3.0,
        "pool_busy": 1.5,  # 0–1 s and 2.5–3 s
        "pool_slot_seconds": 6.0,
        "pool_unread": None,
    }


def test_a_slow_api_server_is_read_less_often_never_slowing_the_drain() -> None:
    """Each read of the pool blocks the worker's calls: however long the api-server takes
    to answer, reading takes at most POOL_SAMPLE_SHARE of the pass (plus the first read)."""
    clock = [0.0]
    read_seconds = 0.3

    def slow(pool: str) -> PoolReading:
        clock[0] += read_seconds  # the api-server's answer, in the worker's time
        return PoolReading(4, 1)

    watch = PoolWatch("media_api", 1, slow, clock=lambda: clock[0])
    while clock[0] < 60.0:  # a worker that offers a sample after every 0.1 s of calls
        watch.sample(clock[0])
        clock[0] += 0.1
    reading = watch.samples * read_seconds
    assert reading <= POOL_SAMPLE_SHARE * clock[0] + read_seconds, (
        f"{watch.samples} reads took {reading:.1f} s of {clock[0]:.0f} s"
    )
    assert watch.samples >= 2, "still sampled through the pass"
    figures = watch.close(clock[0])
    assert figures["pool_sampled"] == pytest.approx(clock[0]), "each sample held to the next"


def test_a_pool_is_busy_without_room_for_one_more_task_and_never_when_unlimited() -> None:
    two_slot_tasks = PoolWatch("p", 2, Readings(PoolReading(4, 3)))
    two_slot_tasks.sample(0.0)
    assert two_slot_tasks.close(1.0)["pool_busy"] == 1.0
    unlimited = PoolWatch("p", 1, Readings(PoolReading(-1, 50)))
    unlimited.sample(0.0)
    assert unlimited.close(1.0)["pool_busy"] == 0.0


def test_a_failed_read_stops_the_sampling_and_says_why() -> None:
    read = Readings(PoolReading(2, 2), RuntimeError("GET /api/v2/pools/media_api answered 403"))
    watch = PoolWatch("media_api", 1, read)
    for now in (0.0, 1.0, 2.0, 3.0):
        watch.sample(now)
    figures = watch.close(4.0)
    assert read.asked == 2, "nothing is asked after the failure"
    assert figures["pool_sampled"] == figures["pool_busy"] == 1.0, "up to the failed read"
    assert figures["pool_unread"] == "GET /api/v2/pools/media_api answered 403"
    missing = PoolWatch("media_api", 1, None, unread=UNREAD)
    missing.sample(0.0)
    assert missing.close(1.0)["pool_unread"] == UNREAD


def test_every_verdict_but_unknown_has_its_number_on_the_gauge() -> None:
    assert {b.value: b.code for b in Bound} == {
        "unbound": 0,
        "upstream": 1,
        "capacity": 2,
        "database": 3,
        "unknown": None,
    }
    assert set(metrics.BOUND_CODES) == {b.value for b in Bound} - {"unknown"}


def test_an_auto_rate_policy_is_judged_against_its_ceiling() -> None:
    """``rate_per_second: auto`` is not a number: the pool must keep up with the most the
    scope may make, its ``max_rate_per_second``."""
    remote = {**REQUIRED_REMOTE, "rate_per_second": "auto", "max_rate_per_second": 40}
    policy, problems = parse_policy("a", policy_fields("a", remote=remote))
    assert problems == []
    assert policy is not None
    assert DrainSetting.of(policy).rate_per_second == 40
