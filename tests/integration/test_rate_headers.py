"""An API's own rate-limit headers set the shared pace: counted by the sandbox API on loopback.

The sandbox limits calls in fixed windows (``REAL_RATE × WINDOW_SECONDS`` calls per
window) well below the policy's configured rate, and says so in one family of headers
computed from that window. Once the first answers have been read, the scope follows
what the headers say (calls left ÷ seconds to the reset): no 429 at all, and not merely
slow either (the achieved rate stays near the API's real limit).
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from retention.evidence.reconcile import reconcile_run
from retention.evidence.report import format_summary
from retention.queue import limiter
from retention.queue.limiter import TokenBucket, hold_seconds
from retention.queue.rate_headers import X_RATELIMIT, QuotaProblem, QuotaReading, read_quota
from retention.summary import RATE_LIMIT_HEADERS_IGNORED
from retention.ui.queries import policy_figures
from tests.integration.test_cli import cli
from tests.integration.test_remote_limits import FakeClock, prepare, run_workers
from tests.support.policies import remote_policy
from tests.support.remote import enqueue_all, work
from tests.support.tables import create_media_table

REAL_RATE = 20.0  # calls per second the API really allows, in fixed windows…
WINDOW_SECONDS = 2.0  # …of this length: 40 calls a window
CONFIGURED_RATE = 100  # the policy's rate_per_second: five times what the API takes
OBJECTS = 100  # two and a half windows' worth
FAMILIES = ("ietf", "ratelimit", "x-ratelimit", "x-ratelimit-epoch")
# Following remaining ÷ reset in whole seconds (rounded up) spends less than a window
# holds (the pace errs slow near each reset), but never as slowly as half the limit.
SLOWEST_SHARE = 0.5


def limiter_row(db, scope: str) -> dict:
    row = db.execute(
        "SELECT rate_ceiling, effective_rate, configured_rate, learned_rate, learned_until, "
        "header_problem FROM retention.rate_limiters WHERE scope = %s",
        (scope,),
    ).fetchone()
    assert row is not None
    return row


def achieved_rate(times: list[float]) -> float:
    """Calls per second from the first call to the last."""
    return (len(times) - 1) / (max(times) - min(times))


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_of_headers_steers_the_shared_rate_with_no_429(
    family, db, unique_name, sandbox, test_dsn
) -> None:
    sandbox.state.reset(rate=REAL_RATE, window_seconds=WINDOW_SECONDS, headers=family)
    policy = prepare(
        db, unique_name, OBJECTS, rate_per_second=CONFIGURED_RATE, burst=2, claim_batch=10
    )
    run_workers(test_dsn, policy, sandbox, workers=2, limit_seconds=60)
    stats = sandbox.state.stats()
    assert len(stats["effects"]) == OBJECTS
    answers = [r["status"] for r in stats["requests"]]
    assert answers.count(429) == 0, f"{answers.count(429)} of {len(answers)} calls got 429"
    rate = achieved_rate([r["t"] for r in stats["requests"]])
    assert rate <= REAL_RATE * 1.25, f"{rate:.1f}/s: the headers' pace, not the configured rate"
    assert rate >= REAL_RATE * SLOWEST_SHARE, f"{rate:.1f}/s: too slow for the API's limit"
    row = limiter_row(db, policy.remote.scope)
    assert row["learned_rate"] is not None, "the headers' pace was written to the shared row"
    assert row["configured_rate"] == CONFIGURED_RATE


def test_an_auto_rate_starts_low_and_takes_the_rate_from_the_headers(
    db, unique_name, sandbox, test_dsn
) -> None:
    sandbox.state.reset(rate=REAL_RATE, window_seconds=WINDOW_SECONDS, headers="ratelimit")
    policy = prepare(
        db,
        unique_name,
        OBJECTS,
        rate_per_second="auto",
        max_rate_per_second=CONFIGURED_RATE,
        burst=1,
        claim_batch=10,
    )
    assert policy.remote.starting_rate < REAL_RATE / 10, "a low start"
    run_workers(test_dsn, policy, sandbox, workers=2, limit_seconds=60)
    stats = sandbox.state.stats()
    assert len(stats["effects"]) == OBJECTS
    assert stats["throttled"] == 0
    rate = achieved_rate([r["t"] for r in stats["requests"]])
    assert REAL_RATE * SLOWEST_SHARE <= rate <= REAL_RATE * 1.25, f"{rate:.1f}/s"


def reading(remaining: int, reset_seconds: float) -> QuotaReading:
    return QuotaReading(X_RATELIMIT, remaining, reset_seconds)


def bucket(db, name: str, **remote) -> TokenBucket:
    return TokenBucket.for_remote(db, remote_policy(name, burst=5, **remote).remote)


def test_the_headers_pace_holds_until_the_reset_then_the_configured_rate_returns(
    db, unique_name
) -> None:
    first = bucket(db, unique_name, rate_per_second=50)
    first.follow(reading(4, 2.0))  # 2 s: time for the checks below on a loaded machine
    row = limiter_row(db, first.scope)
    assert row["rate_ceiling"] == pytest.approx(4 / 2.0)
    assert row["effective_rate"] == pytest.approx(4 / 2.0)
    later = bucket(db, unique_name, rate_per_second=50)
    assert limiter_row(db, first.scope)["rate_ceiling"] == pytest.approx(2), (
        "a worker starting while the headers' quota holds keeps their pace"
    )
    first.follow(None)
    assert limiter_row(db, first.scope)["rate_ceiling"] == pytest.approx(2), "not reset yet"
    time.sleep(2.1)
    later.follow(None)  # a later worker knows the reset from the row, and falls back
    assert limiter_row(db, first.scope)["rate_ceiling"] == 50
    assert bucket(db, unique_name, rate_per_second=50).learned_until is None


def test_an_auto_rate_keeps_the_last_pace_it_learned_after_the_reset(db, unique_name) -> None:
    auto = {"rate_per_second": "auto", "max_rate_per_second": 50}
    scope = bucket(db, unique_name, **auto)
    assert limiter_row(db, scope.scope)["rate_ceiling"] == 1, "the low start"
    scope.follow(reading(10, 0.4))
    assert limiter_row(db, scope.scope)["rate_ceiling"] == pytest.approx(25)
    time.sleep(0.5)
    scope.follow(None)
    assert limiter_row(db, scope.scope)["rate_ceiling"] == pytest.approx(25)
    bucket(db, unique_name, **auto)
    assert limiter_row(db, scope.scope)["rate_ceiling"] == pytest.approx(25), "not the start"
    scope.follow(reading(1000, 1))
    assert limiter_row(db, scope.scope)["rate_ceiling"] == 50, "never above max_rate_per_second"


def test_nothing_left_closes_the_scope_until_the_reset(db, unique_name) -> None:
    scope = bucket(db, unique_name, rate_per_second=50)
    before = limiter_row(db, scope.scope)["effective_rate"]
    scope.follow(reading(0, 3))
    granted, wait = scope.try_take(1)
    assert granted == 0
    assert 2.5 < wait <= 3, "closed until the reset"
    assert limiter_row(db, scope.scope)["effective_rate"] == before, "its rate unchanged"


def test_ignored_headers_are_remembered_once_and_change_no_rate(db, unique_name) -> None:
    scope = bucket(db, unique_name, rate_per_second=50)
    scope.follow(QuotaProblem(X_RATELIMIT, "the first problem"))
    scope.follow(QuotaProblem(X_RATELIMIT, "a second problem"))
    row = limiter_row(db, scope.scope)
    assert row["header_problem"] == "the first problem", "once per pass"
    assert (row["rate_ceiling"], row["learned_until"]) == (50, None)


CONTRADICTION = {"X-RateLimit-Limit": "40", "X-RateLimit-Remaining": "50", "X-RateLimit-Reset": "5"}


def test_malformed_headers_are_ignored_and_the_summary_says_so_once(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 12)
    policy = remote_policy(unique_name, rate_per_second=200, burst=20, claim_batch=4)
    sandbox.state.configure(extra_headers=CONTRADICTION)
    enqueue_all(db, policy)  # run-1
    for _ in range(2):  # two passes, each meeting the same headers on every answer
        work(test_dsn, policy, sandbox)
    summary = reconcile_run(db, policy, "run-1")
    note = (
        f"{RATE_LIMIT_HEADERS_IGNORED}: X-RateLimit-Remaining 50 is more than X-RateLimit-Limit 40"
    )
    assert summary["rate_limit_headers_note"] == note
    assert format_summary(summary).count(RATE_LIMIT_HEADERS_IGNORED) == 1
    shown = cli("--dsn", test_dsn, "runs", "--policy", policy.name)
    assert shown.stdout.count(note) == 1, shown.stdout + shown.stderr
    figures = policy_figures(db, policy, dt.datetime.now(dt.UTC))
    assert figures.last_run is not None
    assert figures.last_run.rate_limit_headers_note == note
    row = limiter_row(db, policy.remote.scope)
    assert (row["rate_ceiling"], row["learned_rate"]) == (200, None), "the configured rate"
    assert sandbox.state.stats()["throttled"] == 0


def test_after_a_429_the_headers_only_lower_the_rate_until_it_has_recovered(
    db, unique_name
) -> None:
    scope = bucket(db, unique_name, rate_per_second=50)
    halved = scope.throttle(0.01)  # an API may enforce a limit its headers do not say
    scope.follow(reading(400, 10))  # a pace of 40/s: above the halved rate
    row = limiter_row(db, scope.scope)
    assert row["rate_ceiling"] == pytest.approx(40)
    assert row["effective_rate"] == pytest.approx(halved), "it climbs back, as after a 429"
    scope.follow(reading(10, 10))
    assert limiter_row(db, scope.scope)["effective_rate"] == pytest.approx(1), "but it lowers"


def test_a_worker_writes_the_pace_when_it_changes_or_once_a_second_not_per_call(
    db, unique_name
) -> None:
    scope = bucket(db, unique_name, rate_per_second=50)
    clock = FakeClock()
    scope.clock = clock
    for remaining in range(100, 96, -1):  # answers a few ms apart: 10/s to 9.7/s, within 5%
        scope.follow(reading(remaining, 10))
        clock.now += 0.005
    assert scope.paces_followed == 1
    scope.follow(reading(80, 10))  # 8/s: 20% slower
    assert scope.paces_followed == 2
    clock.now += limiter.FOLLOW_REFRESH_SECONDS
    scope.follow(reading(80, 10))
    assert scope.paces_followed == 3, "once a second all the same: the reset moment moves on"
    scope.follow(reading(0, 10))
    assert scope.paces_followed == 4, "nothing left always closes the scope"


HOSTILE_HEADERS = {
    "remaining beyond a 32-bit integer": {
        "X-RateLimit-Remaining": "3000000000",
        "X-RateLimit-Reset": "60",
    },
    "an epoch reset in the far future": {
        "X-RateLimit-Remaining": "5",
        "X-RateLimit-Reset": "999999999999999",
    },
    "a structured reset in the far future": {"RateLimit": '"d";r=5;t=999999999999999'},
    "one call left of a year": {"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "31536000"},
    "none left for a year": {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "31536000"},
}


@pytest.mark.parametrize("headers", HOSTILE_HEADERS.values(), ids=HOSTILE_HEADERS.keys())
@pytest.mark.parametrize("rate", [50, "auto"])
def test_no_answer_fails_the_pass_or_slows_the_scope_beyond_the_retry_after_cap(
    db, unique_name, headers, rate
) -> None:
    """Whatever numbers an API writes in its headers, following them is one statement that
    succeeds, and no single answer holds the scope below one call per MAX_HEADER_SECONDS,
    or steers or closes it for longer than that (as a Retry-After is capped)."""
    extra = {"max_rate_per_second": 50} if rate == "auto" else {}
    scope = bucket(db, unique_name, rate_per_second=rate, **extra)
    scope.follow(read_quota(headers, time.time()))
    row = db.execute(
        "SELECT rate_ceiling, effective_rate, "
        "extract(epoch FROM learned_until - clock_timestamp())::float8 AS steered, "
        "extract(epoch FROM greatest(closed_until, clock_timestamp()) - clock_timestamp())"
        "::float8 AS closed FROM retention.rate_limiters WHERE scope = %s",
        (scope.scope,),
    ).fetchone()
    assert row is not None
    longest = limiter.MAX_HEADER_SECONDS
    assert row["rate_ceiling"] >= 1 / longest, "at least one call per MAX_HEADER_SECONDS"
    assert row["effective_rate"] >= 1 / longest
    assert row["steered"] <= longest, "steered at most that long"
    assert row["closed"] <= longest, "closed at most that long"


def test_a_worker_recovering_from_a_429_writes_the_same_pace_once_not_per_call(
    db, unique_name
) -> None:
    """After a 429 the effective rate climbs back below the headers' pace: an unchanged
    pace is still written only when it changes or once a second, not on every answer."""
    scope = bucket(db, unique_name, rate_per_second=50)
    clock = FakeClock()
    scope.clock = clock
    scope.throttle(0.01)
    for _ in range(5):  # the same 40/s, a few ms apart: above the halved rate
        scope.follow(reading(400, 10))
        clock.now += 0.005
    assert scope.paces_followed == 1


def test_an_auto_scope_starts_low_without_its_burst_of_calls(db, unique_name) -> None:
    """Before any answer said a limit, an auto scope admits one call a second: not a whole
    burst at once (20 at once, then one a second, overruns 60 a minute in its first one)."""
    scope = bucket(db, unique_name, rate_per_second="auto", max_rate_per_second=50)
    granted, _ = scope.try_take(5)
    assert granted == 1, "the starting rate's one token, not the burst of five"
    fixed = bucket(db, f"{unique_name}_fixed", rate_per_second=50)
    # a configured rate starts with its burst, less the take-ahead's reserve
    assert fixed.try_take(5)[0] == int(5 - 50 * hold_seconds(50, 5)) > 1


def shift_back(db, scope: str, seconds: float) -> None:
    """As if ``seconds`` had passed: every moment the scope's row keeps moves back."""
    db.execute(
        "UPDATE retention.rate_limiters SET "
        "closed_until = closed_until - %(s)s * interval '1 second', "
        "updated_at = updated_at - %(s)s * interval '1 second', "
        "busy_since = busy_since - %(s)s * interval '1 second', "
        "last_decrease_at = last_decrease_at - %(s)s * interval '1 second', "
        "learned_until = learned_until - %(s)s * interval '1 second' "
        "WHERE scope = %(scope)s",
        {"s": seconds, "scope": scope},
    )


def busy_grants(db, scope: str, seconds: float | None, grants: int) -> None:
    """``grants`` more tokens granted; with ``seconds``, the busy spell began that long ago."""
    db.execute(
        "UPDATE retention.rate_limiters SET granted_total = granted_total + %(g)s, "
        "busy_since = CASE WHEN %(s)s::float8 IS NULL THEN busy_since "
        "    ELSE clock_timestamp() - %(s)s::float8 * interval '1 second' END, "
        "granted_before_busy = CASE WHEN %(s)s::float8 IS NULL THEN granted_before_busy "
        "    ELSE granted_total END "
        "WHERE scope = %(scope)s",
        {"g": grants, "s": seconds, "scope": scope},
    )


def test_tokens_granted_within_one_hold_never_exceed_the_burst_when_the_headers_raise_the_pace(
    db, unique_name
) -> None:
    """Tokens granted within one hold may all be called at its end: together they stay
    within the burst (the bound ``rate × interval + burst``), even when an answer's headers
    raise the pace in between. The reserve is what the configured rate earns in a hold,
    not what the headers' lower pace earns (the cap would then rise with a slow pace).
    The statements between the two takes last a little longer than the hold: what the
    configured rate earns in that time is allowed on top."""
    rate, burst = 400, 40  # a hold of 50 ms: 20 tokens of reserve
    scope = TokenBucket.for_remote(
        db, remote_policy(unique_name, rate_per_second=rate, burst=burst).remote
    )
    assert scope.hold > 0
    scope.follow(reading(10, 1))  # a pace of 10/s
    assert limiter_row(db, scope.scope)["rate_ceiling"] == pytest.approx(10)
    shift_back(db, scope.scope, 3600)  # idle an hour: the bucket is as full as it gets
    started = time.monotonic()
    first, _ = scope.try_take(1000)
    scope.follow(reading(10_000, 1))  # the next answer: the configured rate again
    assert limiter_row(db, scope.scope)["effective_rate"] == pytest.approx(rate)
    shift_back(db, scope.scope, scope.hold)  # the rest of the hold refills the bucket
    second, _ = scope.try_take(1000)
    slower = time.monotonic() - started  # the statements' own time, besides the hold
    allowed = burst + rate * slower
    assert first + second <= allowed, f"{first} + {second} tokens within one hold"


def test_a_close_by_the_headers_restarts_the_count_of_busy_grants_as_a_pause_does(
    db, unique_name
) -> None:
    """A 429 measures what the API admitted since the scope reopened: the seconds it was
    closed because the headers said nothing was left are not seconds the API admitted
    calls in (an outage pause is not either)."""
    measured = {}
    for how in ("pause", "headers"):
        scope = bucket(db, f"{unique_name}_{how}", rate_per_second=100)
        busy_grants(db, scope.scope, 10, 5 + 1 + 990)  # 99/s beyond the burst of 5
        if how == "pause":
            scope.pause(10)
        else:
            scope.follow(reading(0, 10))
        shift_back(db, scope.scope, 12)  # reopened 2 s ago…
        busy_grants(db, scope.scope, None, 5 + 1 + 150)  # …and admitted 75/s since
        measured[how] = scope.throttle(1.0)
    assert measured["pause"] == pytest.approx(75, rel=0.1)
    assert measured["headers"] == pytest.approx(measured["pause"], rel=0.1)


@pytest.mark.parametrize("closed_by", ["a 429", "the headers"])
def test_a_429_while_the_scope_is_closed_does_not_lower_the_rate_again(
    db, unique_name, closed_by
) -> None:
    """A call refused while the scope is closed was granted before it closed: the close
    already said what that call says (an earlier 429, or headers with nothing left), so
    it lowers nothing, however long after the close it is answered."""
    scope = bucket(db, unique_name, rate_per_second=100)
    busy_grants(db, scope.scope, 10, 5 + 1 + 990)
    if closed_by == "a 429":
        scope.throttle(5)
    else:
        scope.follow(reading(0, 5))
    before = db.execute(
        "SELECT effective_rate, NULLIF(last_decrease_at, '-infinity') AS last_decrease_at "
        "FROM retention.rate_limiters WHERE scope = %s",
        (scope.scope,),
    ).fetchone()
    shift_back(db, scope.scope, 2)  # answered 2 s later: past the once-a-second rule
    after = scope.throttle(1.0)
    assert after == pytest.approx(before["effective_rate"]), "the rate stays"
    row = db.execute(
        "SELECT NULLIF(last_decrease_at, '-infinity') AS last_decrease_at, "
        "closed_until > clock_timestamp() AS closed "
        "FROM retention.rate_limiters WHERE scope = %s",
        (scope.scope,),
    ).fetchone()
    assert row["closed"], "still closed"
    if closed_by == "the headers":
        assert row["last_decrease_at"] == before["last_decrease_at"], (
            "no decrease: the headers may raise the pace again after the reset"
        )
