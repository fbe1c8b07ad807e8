"""The classification table and the decisions it leads to (pure)."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from remotehelpers import remote_policy

from retention.classify import Outcome, backoff_seconds, classify, parse_retry_after
from retention.operations import Claimed
from retention.remote_worker import decide

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("status", "headers", "error", "outcome", "failure_class"),
    [
        (200, {}, None, Outcome.CONFIRMED, None),
        (202, {}, None, Outcome.CONFIRMED, None),
        (204, {}, None, Outcome.CONFIRMED, None),
        (404, {}, None, Outcome.CONFIRMED, None),
        (410, {}, None, Outcome.CONFIRMED, None),
        (429, {}, None, Outcome.RATE_LIMITED, "rate_limited"),
        (429, {"Retry-After": "7"}, None, Outcome.RATE_LIMITED, "rate_limited"),
        (503, {"Retry-After": "3"}, None, Outcome.RATE_LIMITED, "rate_limited"),
        (503, {}, None, Outcome.UNCERTAIN, "http_503"),
        (500, {}, None, Outcome.UNCERTAIN, "http_500"),
        (502, {}, None, Outcome.UNCERTAIN, "http_502"),
        (409, {}, None, Outcome.UNCERTAIN, "http_409"),
        (408, {}, None, Outcome.UNCERTAIN, "http_408"),
        (None, {}, "timeout", Outcome.UNCERTAIN, "timeout"),
        (None, {}, "connection", Outcome.UNCERTAIN, "connection"),
        (400, {}, None, Outcome.REJECTED, "http_400"),
        (422, {}, None, Outcome.REJECTED, "http_422"),
        (405, {}, None, Outcome.REJECTED, "http_405"),
        (401, {}, None, Outcome.AUTH, "http_401"),
        (403, {}, None, Outcome.AUTH, "http_403"),
    ],
)
def test_classification_table(status, headers, error, outcome, failure_class) -> None:
    result = classify(status, headers, error, NOW)
    assert result.outcome is outcome
    assert result.failure_class == failure_class


def test_retry_after_in_seconds_and_as_http_date() -> None:
    assert classify(429, {"retry-after": "7"}, None, NOW).retry_after_seconds == 7
    date = "Sun, 29 Nov 2026 12:00:30 GMT"
    assert parse_retry_after(date, NOW) == 30
    assert parse_retry_after("Sun, 29 Nov 2026 11:00:00 GMT", NOW) == 0
    assert parse_retry_after("soon", NOW) is None
    assert classify(429, {}, None, NOW).retry_after_seconds == 1


def test_backoff_is_capped_exponential_with_jitter() -> None:
    rng = random.Random(1)
    for attempt, step in ((1, 2), (2, 4), (3, 8), (10, 60)):
        values = [backoff_seconds(attempt, 2, 60, rng) for _ in range(50)]
        assert all(step / 2 <= v <= step for v in values)
        assert len(set(values)) > 1


def claimed(attempts: int = 0, auth: int = 0) -> Claimed:
    return Claimed("k", 1, "obj", None, "1", "w", attempts, 1, auth)


def test_decisions() -> None:
    remote = remote_policy("p", max_attempts=3).remote
    rng = random.Random(0)
    assert decide(claimed(), remote, classify(204), rng).state == "done"
    limited = decide(claimed(), remote, classify(429, {"Retry-After": "5"}), rng)
    assert (limited.state, limited.attempt_spent, limited.rate_limited) == ("pending", 0, 1)
    assert limited.not_before is not None
    later = limited.not_before - dt.datetime.now(dt.UTC)
    assert dt.timedelta(seconds=4.9) < later <= dt.timedelta(seconds=5.6)
    assert decide(claimed(), remote, classify(500), rng).state == "pending"
    assert decide(claimed(attempts=2), remote, classify(500), rng).failure_class == "max_attempts"
    assert decide(claimed(attempts=2), remote, classify(500), rng).state == "dead"
    rejected = decide(claimed(), remote, classify(422), rng)
    assert (rejected.state, rejected.failure_class) == ("dead", "http_422")
    assert decide(claimed(auth=0), remote, classify(403), rng).state == "pending"
    held = decide(
        claimed(attempts=1, auth=2),
        replace_attempts(remote),
        classify(403),
        rng,
        others_succeed=True,
    )
    assert (held.state, held.failure_class) == ("dead", "http_403")
    outage = decide(claimed(attempts=1, auth=2), replace_attempts(remote), classify(401), rng)
    assert (outage.state, outage.attempt_spent) == ("pending", 0), "no success seen: credentials"
    never_exhausted = decide(claimed(attempts=2, auth=0), remote, classify(401), rng)
    assert never_exhausted.state == "pending", "401s do not spend max_attempts"


def replace_attempts(remote):
    import dataclasses

    return dataclasses.replace(remote, max_attempts=10)
