"""Classify an HTTP attempt (pure): one table per job kind, one Retry-After rule for all.

Every kind shares two rules, written once in :func:`classify`:

- no response (timeout, connection error) is ``uncertain``;
- 429, or 503 with Retry-After (seconds or HTTP-date), is ``rate_limited``:
  snoozed until Retry-After plus bounded jitter, no attempt spent, and the
  limiter scope pauses (kinds with a limiter) or the pass stops (kinds without).

Everything else is looked up in the kind's :class:`ClassificationTable`. A
3xx is never followed (the sender sets ``allow_redirects=False``) and counts
as a failed attempt in both tables: a redirect is not a confirmation.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from retention.queue.rate_headers import Quota, read_quota

DEFAULT_RETRY_AFTER_SECONDS = 1.0
MAX_RETRY_AFTER_SECONDS = 3600.0


class Outcome(StrEnum):
    """What an attempt came to: the ``outcome_class`` of the ledger and the workers' tallies.

    A member is its string (``Outcome.CONFIRMED == "confirmed"``), so SQL
    parameters, JSON and XCom see plain text.
    """

    # What an answer means (a kind's classification).
    CONFIRMED = "confirmed"  # the effect happened (or had already)
    RATE_LIMITED = "rate_limited"  # snooze: try again after Retry-After, no attempt spent
    UNCERTAIN = "uncertain"  # maybe happened: retry with the same key after backoff
    REJECTED = "rejected"  # will not happen: dead, for review
    AUTH = "auth"  # 401/403: the credentials, or this one object, are refused
    GONE = "gone"  # the receiver asks never to be called again
    HELD = "held"  # a legal hold keeps the object (ours, or the remote side's answer)
    # What is recorded without an answer of its own.
    NOT_CALLED = "not_called"  # screened out before any call (superseded, unsafe path)
    OUTAGE = "outage"  # no answer while the calls around it got none either
    NOT_FOUND_UNVERIFIED = "not_found_unverified"  # a 404 held back by the 404 breaker
    LOCAL_DELETE_RETRY = "local_delete_retry"  # confirmed earlier; only the row delete is left
    SNOOZED = "snoozed"  # put off by hand (``LeasedQueue.snooze``)
    DEAD_LETTERED = "dead_lettered"  # dead-lettered by hand (``LeasedQueue.dead_letter``)


@dataclass(frozen=True)
class Classification:
    """What one attempt's answer means, as a kind's ``attempt`` reports it to the worker.

    ``answered`` is False when nothing answered at all (a timeout, a refused
    connection): the worker's outage detector needs only that, not the transport.
    ``quota`` is what the answer's rate-limit headers said of the API's quota (a
    reading, a problem with them, or None): the worker's limiter paces by it.
    A kind that knows more (the operations' 404 breaker, proven credentials)
    returns a subclass with its own fields.
    """

    outcome: Outcome
    status: int | None  # the remote's status code, when its transport has one
    failure_class: str | None = None
    retry_after_seconds: float | None = None
    reason: str = ""
    answered: bool = True
    quota: Quota = None

    @property
    def answer(self) -> str:
        """How the remote answered, for the pass's tally: ``204``, ``timeout``, ``confirmed``."""
        if self.status is not None:
            return str(self.status)
        return self.failure_class or self.outcome.value


@dataclass(frozen=True)
class ClassificationTable:
    """Status codes → outcome for one job kind; the first matching row wins."""

    name: str
    rows: tuple[tuple[range | tuple[int, ...], Outcome], ...]
    default: Outcome

    def outcome_for(self, status: int) -> Outcome:
        for codes, outcome in self.rows:
            if status in codes:
                return outcome
        return self.default


# Remote deletions: a missing object is as deleted as a deleted one.
OPERATION_ANSWERS = ClassificationTable(
    "operations",
    (
        (range(200, 300), Outcome.CONFIRMED),
        ((404, 410), Outcome.CONFIRMED),
        ((401, 403), Outcome.AUTH),
        ((408, 409), Outcome.UNCERTAIN),
        (range(300, 400), Outcome.UNCERTAIN),
        (range(500, 600), Outcome.UNCERTAIN),
    ),
    default=Outcome.REJECTED,
)

# The same, for APIs whose 404 does not prove a deletion (``not_found_is_deleted: false``).
OPERATION_ANSWERS_STRICT = ClassificationTable(
    "operations (404 is not a deletion)",
    ((range(404, 405), Outcome.REJECTED), *OPERATION_ANSWERS.rows),
    default=Outcome.REJECTED,
)

# Event deliveries: only 2xx delivers; 410 turns the receiver off; the rest is retried.
EVENT_ANSWERS = ClassificationTable(
    "events",
    (
        (range(200, 300), Outcome.CONFIRMED),
        ((410,), Outcome.GONE),
    ),
    default=Outcome.UNCERTAIN,
)


def parse_retry_after(value: str | None, now: dt.datetime) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return min(float(text), MAX_RETRY_AFTER_SECONDS)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return min(max(0.0, (when - now).total_seconds()), MAX_RETRY_AFTER_SECONDS)


def classify(
    status: int | None,
    headers: Mapping[str, str] | None,
    error: str | None,
    now: dt.datetime,
    table: ClassificationTable = OPERATION_ANSWERS,
) -> Classification:
    """Decide what an attempt means; ``error`` is ``timeout`` or ``connection`` when no answer."""
    if status is None:
        kind = error or "connection"
        return Classification(
            Outcome.UNCERTAIN, None, kind, reason=f"no response ({kind})", answered=False
        )
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    retry_after = parse_retry_after(lowered.get("retry-after"), now)
    quota = read_quota(lowered, now.timestamp())
    if status == 429 or (status == 503 and retry_after is not None):
        wait = DEFAULT_RETRY_AFTER_SECONDS if retry_after is None else retry_after
        return Classification(
            Outcome.RATE_LIMITED,
            status,
            "rate_limited",
            wait,
            f"HTTP {status}, retry after {wait:g}s",
            quota=quota,
        )
    outcome = table.outcome_for(status)
    failure = None if outcome is Outcome.CONFIRMED else f"http_{status}"
    reason = f"HTTP {status}"
    if 300 <= status < 400:
        location = lowered.get("location")
        reason = f"HTTP {status} redirect (not followed)" + (f" to {location}" if location else "")
    return Classification(outcome, status, failure, reason=reason, quota=quota)


def jitter_fraction(key: str, step: int) -> float:
    """A number in [0, 1) fixed by the job and the attempt: jitter without a random source.

    Different jobs spread out as random jitter would, while a decision stays a
    pure function of its inputs (and a test can predict it).
    """
    digest = hashlib.sha256(f"{key}|{step}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def backoff_seconds(attempt: int, base: float, cap: float, jitter: float) -> float:
    """Capped exponential backoff with "equal jitter": between half and all of the step."""
    step = min(cap, base * 2 ** min(max(0, attempt - 1), 60))  # no overflow on long streaks
    return step / 2 + jitter * step / 2


def retry_after_with_jitter(seconds: float, jitter: float) -> float:
    """Retry-After plus bounded jitter (at most 10%, at most 1 s), never earlier."""
    return seconds + jitter * min(1.0, 0.1 * seconds)
