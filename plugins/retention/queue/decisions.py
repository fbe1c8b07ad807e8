"""The ledger changes every job kind shares (pure): snooze on Retry-After, retry with backoff.

A kind's ``decide`` handles what is its own (what confirms, what is dead) and
builds the rest from these, so the Retry-After rule and the backoff rule are
written once. Jitter comes from the job's key and the attempt, so a decision
is a pure function of the job, the answer and the clock.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from retention.queue.classify import (
    DEFAULT_RETRY_AFTER_SECONDS,
    Classification,
    backoff_seconds,
    jitter_fraction,
    retry_after_with_jitter,
)
from retention.queue.leased import Finish, State


def pending_again(c: Classification, **changes: Any) -> Finish:
    """Pending again, recording the answer's outcome, status, class and reason."""
    return Finish(
        state=State.PENDING,
        outcome=c.outcome,
        status=c.status,
        failure_class=c.failure_class,
        reason=c.reason,
        **changes,
    )


def snoozed(key: str, c: Classification, now: dt.datetime) -> Finish:
    """Rate limited: pending again after Retry-After plus jitter, no attempt spent."""
    seconds = c.retry_after_seconds or DEFAULT_RETRY_AFTER_SECONDS
    wait = retry_after_with_jitter(seconds, jitter_fraction(key, 0))
    return pending_again(
        c, not_before=now + dt.timedelta(seconds=wait), attempt_spent=0, rate_limited=1
    )


def retried(
    key: str,
    step: int,
    c: Classification,
    now: dt.datetime,
    *,
    base: float,
    cap: float,
    attempt_spent: int = 1,
    auth_failure: bool = False,
) -> Finish:
    """Pending again after capped exponential backoff with jitter (step = the backoff step)."""
    wait = backoff_seconds(step, base, cap, jitter_fraction(key, step))
    return pending_again(
        c,
        not_before=now + dt.timedelta(seconds=wait),
        attempt_spent=attempt_spent,
        auth_failure=auth_failure,
    )


def dead(c: Classification, *, failure_class: str | None = None, reason: str = "") -> Finish:
    """Dead, for review and replay (the attempt that led here is spent)."""
    return Finish(
        state=State.DEAD,
        outcome=c.outcome,
        status=c.status,
        failure_class=failure_class or c.failure_class,
        reason=reason or c.reason,
    )
