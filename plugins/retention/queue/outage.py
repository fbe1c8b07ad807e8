"""Telling an outage from one object's failure, for any kind: the worker asks, this decides.

A call that got no answer at all (``Classification.answered`` is False: a
timeout, a refused connection) is about its own object only when the calls
around it answered. Two in a row, or none answered in the whole pass, is an
outage of the scope: those jobs are snoozed without spending an attempt, and
the scope pauses with a growing backoff (:meth:`OutageDetector.next_pause`).

The detector only remembers positions within the current batch; the worker
turns its verdicts into ledger changes (:func:`outage_finish`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from retention.queue.classify import Classification, Outcome
from retention.queue.leased import Finish, State

OUTAGE_MAX_PAUSE_SECONDS = 60.0
OUTAGE_FAILURE_CLASS = "api_unreachable"


@dataclass
class OutageDetector:
    """The outage state of one worker pass."""

    tentative: tuple[int, Classification] | None = None  # a lone unanswered call, by position
    answered: bool = False  # any answer in this pass
    in_outage: bool = False  # since the last answer
    pauses: int = 0

    def observe(
        self, position: int, c: Classification
    ) -> tuple[bool, tuple[int, Classification] | None]:
        """Whether the call at ``position`` of the batch is part of an outage, and the earlier
        unanswered call it pulls into the outage with it (that one spends no attempt either)."""
        if c.answered:
            self.tentative = None
            self.answered = True
            self.in_outage = False
            return False, None
        if self.tentative is not None:
            earlier, self.tentative = self.tentative, None
            self.in_outage = True
            return True, earlier
        if self.in_outage:
            return True, None
        self.tentative = (position, c)  # maybe this object only: decided if the next one answers
        return False, None

    def settle(self) -> tuple[int, Classification] | None:
        """At the end of a batch: a lone unanswered call in a pass where nothing answered is an
        outage too (a single-object failure needs other calls to answer around it). Positions
        are per batch, so a lone failure among answers stays its own."""
        earlier, self.tentative = self.tentative, None
        return earlier if earlier is not None and not self.answered else None

    def next_pause(self) -> float:
        """Seconds the scope pauses for the next outage call: 1, 2, 4, … at most 60."""
        self.pauses += 1
        return min(OUTAGE_MAX_PAUSE_SECONDS, 2.0 ** min(self.pauses - 1, 10))


def outage_finish(c: Classification, now: dt.datetime, pause: float) -> Finish:
    """An outage call's ledger change: pending again after the pause, no attempt spent."""
    return Finish(
        state=State.PENDING,
        outcome=Outcome.OUTAGE,
        status=None,
        failure_class=OUTAGE_FAILURE_CLASS,
        reason=c.reason,
        not_before=now + dt.timedelta(seconds=pause),
        attempt_spent=0,
    )
