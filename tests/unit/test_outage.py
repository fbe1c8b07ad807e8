"""Telling an outage from one object's failure (pure): the rule as a table."""

from __future__ import annotations

import datetime as dt

import pytest

from retention.queue.classify import Classification, Outcome
from retention.queue.leased import State
from retention.queue.outage import OutageDetector, outage_finish

ANSWER = Classification(Outcome.CONFIRMED, 204, reason="HTTP 204")
SILENCE = Classification(
    Outcome.UNCERTAIN, None, "timeout", reason="no response (timeout)", answered=False
)


def verdicts(calls: str) -> tuple[list[str], str]:
    """``a`` an answer, ``-`` no answer; each call's verdict, then the batch's settlement:
    ``ok`` its own, ``outage``, ``outage+<i>`` (an outage that pulls call i in with it)."""
    detector = OutageDetector()
    seen = []
    for position, call in enumerate(calls):
        outage, earlier = detector.observe(position, ANSWER if call == "a" else SILENCE)
        word = "outage" if outage else "ok"
        seen.append(word + (f"+{earlier[0]}" if earlier else ""))
    settled = detector.settle()
    return seen, "-" if settled is None else f"outage {settled[0]}"


@pytest.mark.parametrize(
    ("calls", "each", "settled"),
    [
        ("a", ["ok"], "-"),
        ("aa", ["ok", "ok"], "-"),
        ("-a", ["ok", "ok"], "-"),  # a lone failure among answers is its object's
        ("a-", ["ok", "ok"], "-"),
        ("a-a", ["ok", "ok", "ok"], "-"),
        ("-", ["ok"], "outage 0"),  # nothing answered in the pass: an outage after all
        ("--", ["ok", "outage+0"], "-"),  # two in a row: both are the outage
        ("---", ["ok", "outage+0", "outage"], "-"),
        ("--a-", ["ok", "outage+0", "ok", "ok"], "-"),  # an answer ends the outage
        ("a--", ["ok", "ok", "outage+1"], "-"),
    ],
)
def test_an_outage_is_two_silences_in_a_row_or_a_pass_without_answers(
    calls: str, each: list[str], settled: str
) -> None:
    assert verdicts(calls) == (each, settled)


def test_the_pause_doubles_up_to_a_minute_and_spends_no_attempt() -> None:
    detector = OutageDetector()
    assert [detector.next_pause() for _ in range(9)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    finish = outage_finish(SILENCE, now, 4.0)
    assert (finish.state, finish.outcome, finish.attempt_spent) == (State.PENDING, "outage", 0)
    assert finish.failure_class == "api_unreachable"
    assert finish.not_before == now + dt.timedelta(seconds=4)
