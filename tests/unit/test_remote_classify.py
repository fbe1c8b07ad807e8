"""The classification tables and the decisions they lead to (pure)."""

from __future__ import annotations

import datetime as dt

import pytest

from retention.events.outbox import Event, decide_event
from retention.objects.decide import OperationClassification, decide_operation, known
from retention.objects.keys import Operation
from retention.queue.classify import (
    EVENT_ANSWERS,
    Classification,
    Outcome,
    backoff_seconds,
    classify,
    jitter_fraction,
    parse_retry_after,
)
from retention.queue.rate_headers import X_RATELIMIT, QuotaProblem, QuotaReading
from tests.support.policies import remote_policy

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


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_failed_attempts_in_both_tables(status: int) -> None:
    headers = {"Location": "http://elsewhere.example/x"}
    operation = classify(status, headers, None, NOW)
    event = classify(status, headers, None, NOW, EVENT_ANSWERS)
    assert operation.outcome is Outcome.UNCERTAIN
    assert event.outcome is Outcome.UNCERTAIN
    assert operation.failure_class == event.failure_class == f"http_{status}"
    assert "not followed" in operation.reason


@pytest.mark.parametrize(
    ("status", "headers", "outcome"),
    [
        (200, {}, Outcome.CONFIRMED),
        (204, {}, Outcome.CONFIRMED),
        (410, {}, Outcome.GONE),
        (404, {}, Outcome.UNCERTAIN),
        (401, {}, Outcome.UNCERTAIN),
        (500, {}, Outcome.UNCERTAIN),
        (429, {}, Outcome.RATE_LIMITED),
        (503, {"Retry-After": "2"}, Outcome.RATE_LIMITED),
    ],
)
def test_event_classification_table(status: int, headers: dict, outcome: Outcome) -> None:
    assert classify(status, headers, None, NOW, EVENT_ANSWERS).outcome is outcome


def test_backoff_is_capped_exponential_with_jitter() -> None:
    for attempt, step in ((1, 2), (2, 4), (3, 8), (10, 60)):
        values = [
            backoff_seconds(attempt, 2, 60, jitter_fraction(f"k{i}", attempt)) for i in range(50)
        ]
        assert all(step / 2 <= v <= step for v in values)
        assert len(set(values)) > 1, "different jobs spread out"
    assert backoff_seconds(3, 2, 60, 0.0) == 4
    assert backoff_seconds(5000, 2, 600, 0.5) == 450, "a long 401 streak never overflows"
    assert backoff_seconds(3, 2, 60, 0.999) == pytest.approx(8, abs=0.01)


def test_jitter_is_a_pure_function_of_the_job_and_the_attempt() -> None:
    assert jitter_fraction("k", 1) == jitter_fraction("k", 1)
    assert jitter_fraction("k", 1) != jitter_fraction("k", 2)
    assert all(0 <= jitter_fraction(f"k{i}", 1) < 1 for i in range(100))


def claimed(attempts: int = 0, auth: int = 0) -> Operation:
    return Operation("k", 1, "obj", None, "1", "w", attempts, 1, auth)


def proven(c: Classification) -> Classification:
    return OperationClassification(
        c.outcome,
        c.status,
        c.failure_class,
        c.retry_after_seconds,
        c.reason,
        credentials_proven=True,
    )


def test_decisions() -> None:
    remote = remote_policy("p", max_attempts=3).remote
    roomy = remote.model_copy(update={"max_attempts": 10})

    def decide(op: Operation, status: int, headers=None, spec=remote, credentials_proven=False):
        c = classify(status, headers or {}, None, NOW)
        return decide_operation(op, proven(c) if credentials_proven else c, NOW, spec)

    assert decide(claimed(), 204).state == "done"
    limited = decide(claimed(), 429, {"Retry-After": "5"})
    assert (limited.state, limited.attempt_spent, limited.rate_limited) == ("pending", 0, 1)
    assert limited.not_before is not None
    later = limited.not_before - NOW
    assert dt.timedelta(seconds=5) <= later <= dt.timedelta(seconds=5.5)
    assert decide(claimed(), 500).state == "pending"
    assert decide(claimed(attempts=2), 500).failure_class == "max_attempts"
    assert decide(claimed(attempts=2), 500).state == "dead"
    rejected = decide(claimed(), 422)
    assert (rejected.state, rejected.failure_class) == ("dead", "http_422")
    assert decide(claimed(auth=0), 403).state == "pending"
    held = decide(claimed(attempts=1, auth=2), 403, spec=roomy, credentials_proven=True)
    assert (held.state, held.failure_class) == ("dead", "http_403")
    outage = decide(claimed(attempts=1, auth=2), 401, spec=roomy)
    assert (outage.state, outage.attempt_spent) == ("pending", 0), "no success seen: credentials"
    never_exhausted = decide(claimed(attempts=2, auth=0), 401)
    assert never_exhausted.state == "pending", "401s do not spend max_attempts"


def test_decide_is_pure_the_clock_is_passed_in() -> None:
    remote = remote_policy("p").remote
    c = classify(500, {}, None, NOW)
    first = decide_operation(claimed(attempts=1), c, NOW, remote)
    assert first == decide_operation(claimed(attempts=1), c, NOW, remote)
    later = decide_operation(claimed(attempts=1), c, NOW + dt.timedelta(hours=1), remote)
    assert later.not_before == first.not_before + dt.timedelta(hours=1)


def test_event_decisions() -> None:
    notify = remote_policy(
        "p", notify={"http_conn_id": "e", "endpoint": "/e", "max_attempts": 3}
    ).notify
    event = Event("evt_1", "{}", 0)

    def decide(status: int, attempts: int = 0, headers=None):
        c = classify(status, headers or {}, None, NOW, EVENT_ANSWERS)
        return decide_event(Event("evt_1", "{}", attempts), c, NOW, notify)

    assert decide(204).state == "delivered"
    snoozed = decide(429, headers={"Retry-After": "30"})
    assert (snoozed.state, snoozed.attempt_spent) == ("pending", 0)
    assert snoozed.not_before is not None
    assert snoozed.not_before >= NOW + dt.timedelta(seconds=30)
    gone = decide(410)
    assert (gone.state, gone.attempt_spent, gone.not_before) == ("pending", 0, None)
    retry = decide(500, attempts=1)
    assert (retry.state, retry.attempt_spent) == ("pending", 1)
    assert decide(500, attempts=2).state == "dead"
    assert event.key == "evt_1"


@pytest.mark.parametrize(
    ("status", "headers", "error", "expected"),
    [
        (
            None,
            {},
            None,
            Classification(
                Outcome.UNCERTAIN,
                None,
                "connection",
                None,
                "no response (connection)",
                answered=False,
            ),
        ),
        (
            None,
            {},
            "timeout",
            Classification(
                Outcome.UNCERTAIN, None, "timeout", None, "no response (timeout)", answered=False
            ),
        ),
        (204, {}, None, Classification(Outcome.CONFIRMED, 204, None, None, "HTTP 204")),
        (422, {}, None, Classification(Outcome.REJECTED, 422, "http_422", None, "HTTP 422")),
        (
            429,
            {"Retry-After": "7"},
            None,
            Classification(
                Outcome.RATE_LIMITED, 429, "rate_limited", 7.0, "HTTP 429, retry after 7s"
            ),
        ),
        (
            503,
            {"retry-after": "Sun, 29 Nov 2026 12:00:02 GMT"},
            None,
            Classification(
                Outcome.RATE_LIMITED, 503, "rate_limited", 2.0, "HTTP 503, retry after 2s"
            ),
        ),
        (
            300,
            {"LOCATION": "https://elsewhere/x"},
            None,
            Classification(
                Outcome.UNCERTAIN,
                300,
                "http_300",
                None,
                "HTTP 300 redirect (not followed) to https://elsewhere/x",
            ),
        ),
        (
            399,
            {},
            None,
            Classification(
                Outcome.UNCERTAIN, 399, "http_399", None, "HTTP 399 redirect (not followed)"
            ),
        ),
        (400, {}, None, Classification(Outcome.REJECTED, 400, "http_400", None, "HTTP 400")),
    ],
)
def test_classifications_are_exact(status, headers, error, expected) -> None:
    assert classify(status, headers, error, NOW) == expected


def test_retry_after_is_capped_and_never_negative() -> None:
    assert parse_retry_after("999999", NOW) == 3600
    assert parse_retry_after(" 12 ", NOW) == 12
    assert parse_retry_after("", NOW) is None
    assert parse_retry_after(None, NOW) is None
    naive_date = "Sun, 29 Nov 2026 12:00:10"  # no zone: read as UTC
    assert parse_retry_after(naive_date, NOW) == 10
    assert parse_retry_after("Mon, 29 Nov 2027 12:00:00 GMT", NOW) == 3600


def test_jitter_depends_on_the_key_the_step_and_nothing_else() -> None:
    assert jitter_fraction("a", 1) != jitter_fraction("b", 1)
    assert jitter_fraction("a", 0) != jitter_fraction("a", 1)
    from retention.queue.classify import retry_after_with_jitter

    assert retry_after_with_jitter(5, 0.0) == 5
    assert retry_after_with_jitter(5, 1.0) == 5.5, "at most 10%"
    assert retry_after_with_jitter(30, 1.0) == 31, "at most 1 s"


def test_shared_decisions_carry_the_answer_and_the_clock() -> None:
    from retention.queue.decisions import dead, retried, snoozed
    from retention.queue.leased import Finish, State

    limited = classify(429, {"Retry-After": "4"}, None, NOW)
    wait = 4 + jitter_fraction("job", 0) * 0.4
    assert snoozed("job", limited, NOW) == Finish(
        state=State.PENDING,
        outcome=Outcome.RATE_LIMITED,
        status=429,
        failure_class="rate_limited",
        reason="HTTP 429, retry after 4s",
        not_before=NOW + dt.timedelta(seconds=wait),
        attempt_spent=0,
        rate_limited=1,
    )
    failed = classify(502, {}, None, NOW)
    step_wait = backoff_seconds(3, 2, 600, jitter_fraction("job", 3))
    assert retried("job", 3, failed, NOW, base=2, cap=600) == Finish(
        state=State.PENDING,
        outcome=Outcome.UNCERTAIN,
        status=502,
        failure_class="http_502",
        reason="HTTP 502",
        not_before=NOW + dt.timedelta(seconds=step_wait),
        attempt_spent=1,
        auth_failure=False,
    )
    refused = classify(401, {}, None, NOW)
    assert retried("job", 2, refused, NOW, base=2, cap=600, attempt_spent=0, auth_failure=True) == (
        Finish(
            state=State.PENDING,
            outcome=Outcome.AUTH,
            status=401,
            failure_class="http_401",
            reason="HTTP 401",
            not_before=NOW
            + dt.timedelta(seconds=backoff_seconds(2, 2, 600, jitter_fraction("job", 2))),
            attempt_spent=0,
            auth_failure=True,
        )
    )
    assert dead(failed) == Finish(
        state=State.DEAD,
        outcome=Outcome.UNCERTAIN,
        status=502,
        failure_class="http_502",
        reason="HTTP 502",
    )
    assert dead(failed, failure_class="max_attempts", reason="8 attempts") == Finish(
        state=State.DEAD,
        outcome=Outcome.UNCERTAIN,
        status=502,
        failure_class="max_attempts",
        reason="8 attempts",
    )


def test_finish_is_keyword_only_and_every_outcome_and_state_in_use_is_a_member() -> None:
    """Outcomes and states are enums; a member is its string, so SQL and JSON see no change."""
    import json

    from retention.queue.leased import Finish, State

    with pytest.raises(TypeError):
        Finish("done", Outcome.CONFIRMED, 204)  # type: ignore[misc]
    recorded_without_an_answer = {
        "not_called",
        "outage",
        "local_delete_retry",
        "not_found_unverified",
        "snoozed",
        "dead_lettered",
    }
    assert recorded_without_an_answer <= {o.value for o in Outcome}
    assert {s.value for s in State} == {
        "pending", "in_flight", "done", "dead", "delivered", "held"
    }  # fmt: skip
    finish = Finish(state=State.DONE, outcome=Outcome.OUTAGE, status=None)
    assert finish.state == "done"
    assert finish.outcome == "outage"
    assert json.dumps({finish.outcome: finish.state}) == '{"outage": "done"}'


def test_no_finish_is_built_from_a_bare_string() -> None:
    """Every ``Finish(...)`` in the package names its state and outcome by enum member."""
    import ast
    from pathlib import Path

    import retention

    bare = []
    for path in Path(retention.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Finish"):
                continue
            if node.args:
                bare.append(f"{path.name}:{node.lineno} positional")
            for kw in node.keywords:
                if kw.arg in {"state", "outcome"} and isinstance(kw.value, ast.Constant):
                    bare.append(f"{path.name}:{node.lineno} {kw.arg}={kw.value.value!r}")
    assert bare == []


def test_every_answer_carries_what_its_rate_limit_headers_said() -> None:
    headers = {"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "12", "X-RateLimit-Reset": "3"}
    heard = QuotaReading(X_RATELIMIT, 12, 3.0, 60)
    assert classify(204, headers, None, NOW).quota == heard
    assert classify(503, headers, None, NOW).quota == heard
    assert classify(429, {**headers, "Retry-After": "3"}, None, NOW).quota == heard
    assert classify(204, {}, None, NOW).quota is None
    assert classify(None, None, "timeout", NOW).quota is None
    bad = classify(204, {**headers, "X-RateLimit-Remaining": "61"}, None, NOW).quota
    assert isinstance(bad, QuotaProblem)
    assert known(classify(204, headers, None, NOW)).quota == heard, "kept for the worker"
