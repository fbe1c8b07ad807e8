"""Classify an HTTP attempt before touching the ledger (pure functions).

- confirmed (2xx, 404, 410): done, and the local row is deleted in the same transaction;
- rate_limited (429, or 503 with Retry-After): pending again after Retry-After plus
  jitter, the whole limiter scope pauses, and no attempt is spent;
- uncertain (timeout, connection error, 408, 409, other 5xx): retried later with the
  same key, after capped exponential backoff with jitter;
- rejected (any other 4xx): dead, with the failure class, for review;
- auth (401, 403): retried; a streak across objects stops the task (a credential
  problem, not an object's), while one object refused 3 times in a row goes dead.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

DEFAULT_RETRY_AFTER_SECONDS = 1.0
MAX_RETRY_AFTER_SECONDS = 3600.0


class Outcome(StrEnum):
    CONFIRMED = "confirmed"
    RATE_LIMITED = "rate_limited"
    UNCERTAIN = "uncertain"
    REJECTED = "rejected"
    AUTH = "auth"


@dataclass(frozen=True)
class Classification:
    outcome: Outcome
    status: int | None
    failure_class: str | None = None
    retry_after_seconds: float | None = None
    reason: str = ""


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
    headers: Mapping[str, str] | None = None,
    error: str | None = None,
    now: dt.datetime | None = None,
) -> Classification:
    """Decide what an attempt means; ``error`` is ``timeout`` or ``connection`` when no answer."""
    if status is None:
        kind = error or "connection"
        return Classification(Outcome.UNCERTAIN, None, kind, reason=f"no response ({kind})")
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    retry_after = parse_retry_after(headers.get("retry-after"), now or dt.datetime.now(dt.UTC))
    if 200 <= status < 300 or status in (404, 410):
        return Classification(Outcome.CONFIRMED, status, reason=f"HTTP {status}")
    if status == 429 or (status == 503 and retry_after is not None):
        wait = DEFAULT_RETRY_AFTER_SECONDS if retry_after is None else retry_after
        return Classification(
            Outcome.RATE_LIMITED,
            status,
            "rate_limited",
            wait,
            f"HTTP {status}, retry after {wait:g}s",
        )
    if status in (401, 403):
        return Classification(Outcome.AUTH, status, f"http_{status}", reason=f"HTTP {status}")
    if status in (408, 409) or status >= 500:
        return Classification(Outcome.UNCERTAIN, status, f"http_{status}", reason=f"HTTP {status}")
    return Classification(Outcome.REJECTED, status, f"http_{status}", reason=f"HTTP {status}")


def backoff_seconds(
    attempt: int, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """Capped exponential backoff with "equal jitter": between half and all of the step."""
    step = min(cap, base * 2 ** max(0, attempt - 1))
    return step / 2 + (rng or random).uniform(0, step / 2)


def retry_after_with_jitter(seconds: float, rng: random.Random | None = None) -> float:
    """Retry-After plus bounded jitter (at most 10%, at most 1 s), never earlier."""
    return seconds + (rng or random).uniform(0, min(1.0, 0.1 * seconds))
