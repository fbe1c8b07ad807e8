"""What the ledger should say about one operation's answer (pure, tested as a table).

A kind's ``attempt`` says what an answer means (:class:`OperationClassification`,
with what only remote deletions know: whether the credentials are proven and
whether a 404 may count yet); :func:`decide_operation` turns that into the
ledger change. The shared rules (Retry-After, backoff with jitter) come from
``retention.queue.decisions``. No database, no network, no clock: the time is
passed in.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, fields, replace

from retention.objects.keys import Operation
from retention.policy.model import RemoteSpec
from retention.queue.classify import Classification, Outcome
from retention.queue.decisions import dead, retried, snoozed
from retention.queue.leased import Finish, State

AUTH_REFUSALS_BEFORE_DEAD = 3
NOT_FOUND_HOLD_SECONDS = 60.0


@dataclass(frozen=True)
class OperationClassification(Classification):
    """A remote deletion's answer, with what the ledger knows about it."""

    credentials_proven: bool = False  # for AUTH: other calls with these credentials succeed
    endpoint_unverified: bool = False  # a 404 before the endpoint ever answered 2xx


def known(c: Classification) -> OperationClassification:
    """``c`` as an operation's classification (nothing proven, nothing held back yet)."""
    if isinstance(c, OperationClassification):
        return c
    shared = {f.name: getattr(c, f.name) for f in fields(Classification)}
    return OperationClassification(**shared)


def not_called(failure_class: str, reason: str) -> Finish:
    """Dead without a call: the screen refused it (superseded, an unsafe path)."""
    return Finish(
        state=State.DEAD,
        outcome=Outcome.NOT_CALLED,
        failure_class=failure_class,
        reason=reason,
        attempt_spent=0,
    )


def held_finish(reason: str, *, status: int | None = None, failure_class: str = "held") -> Finish:
    """Kept by a legal hold: waits in ``held``, no attempt spent, not a failure; lifting
    the hold (or the next run's re-check) makes it pending again."""
    return Finish(
        state=State.HELD,
        outcome=Outcome.HELD,
        status=status,
        failure_class=failure_class,
        reason=reason,
        attempt_spent=0,
    )


def decide_operation(
    op: Operation, c: Classification, now: dt.datetime, remote: RemoteSpec
) -> Finish:
    """Turn a classification into the ledger change (pure).

    429s snooze and spend no attempt. 401/403 spend no attempt either (a
    credential outage must not exhaust healthy objects); an object refused 3
    times in a row goes dead only when other calls succeed
    (``credentials_proven``), which shows the credentials are fine.
    """
    c = known(c)
    attempts = op.attempt_count + 1
    if c.outcome is Outcome.CONFIRMED and c.endpoint_unverified:
        return Finish(
            state=State.PENDING,
            outcome=Outcome.NOT_FOUND_UNVERIFIED,
            status=c.status,
            failure_class="not_found_breaker",
            reason="404 held back until the endpoint has answered 2xx (the endpoint template "
            "or connection may be wrong); no attempt spent",
            not_before=now + dt.timedelta(seconds=NOT_FOUND_HOLD_SECONDS),
            attempt_spent=0,
        )
    if c.outcome is Outcome.HELD:
        return held_finish(c.reason, status=c.status, failure_class="remote_held")
    if c.outcome is Outcome.CONFIRMED:
        return Finish(state=State.DONE, outcome=c.outcome, status=c.status, reason=c.reason)
    if c.outcome is Outcome.RATE_LIMITED:
        return snoozed(op.key, c, now)
    if c.outcome is Outcome.REJECTED:
        return dead(c)
    backoff = {"base": remote.backoff_base_seconds, "cap": remote.backoff_max_seconds}
    if c.outcome is Outcome.AUTH:
        refusals = op.auth_failure_count + 1
        if c.credentials_proven and refusals >= AUTH_REFUSALS_BEFORE_DEAD:
            held = f"{c.reason} on {refusals} attempts in a row while other calls succeed"
            return replace(dead(c, reason=held), auth_failure=True)
        return retried(op.key, refusals, c, now, **backoff, attempt_spent=0, auth_failure=True)
    if attempts >= remote.max_attempts:
        return dead(
            c, failure_class="max_attempts", reason=f"{attempts} attempts; last: {c.reason}"
        )
    return retried(op.key, attempts, c, now, **backoff)
