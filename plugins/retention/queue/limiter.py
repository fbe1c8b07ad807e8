"""A token bucket kept in Postgres, shared by every worker of a limiter scope.

However many tasks, workers and DAGs call the same API, they take tokens from
one row of ``retention.rate_limiters``, so together they stay within
``rate_per_second`` plus ``burst`` (plus the take-ahead allowance below).
Taking tokens is one short statement; waiting happens in Python, never inside
a transaction.  The configured rate is a ceiling: an unexpected 429 halves the
scope's effective rate and closes it until Retry-After, and the rate climbs
back linearly over ``recovery_seconds``.

A worker that calls fast takes a few tokens in one statement and keeps them
for at most ``HOLD_SECONDS`` from before the statement began: as many as the
scope earns in that time at its effective rate, and as this worker calls in
it at its measured pace (:func:`tokens_to_take`). At a low rate, or against a
slow API, that is one token per statement. Tokens it has not used in time, or
holds when it is told to slow down (its own 429, an outage), are dropped,
never handed on. So in any interval of ``t`` seconds a scope's calls stay
within ``rate × (t + HOLD_SECONDS) + burst``, and a Retry-After closes the
scope to new grants at once; calls on tokens granted before it can still go
out within ``HOLD_SECONDS``, as a call already in flight would.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.policy.model import RemoteSpec
from retention.stopping import stop_requested, stoppable_sleep

log = logging.getLogger(__name__)

MAX_SINGLE_WAIT_SECONDS = 1.0
HOLD_SECONDS = 0.05  # longest a worker keeps tokens it took ahead of its calls
PACE_SMOOTHING = 0.3  # weight of the newest gap between calls in the measured pace


def tokens_to_take(upcoming: int, rate: float, pace_seconds: float | None) -> int:
    """How many tokens a worker asks for in one statement: what it calls within ``HOLD_SECONDS``.

    At most ``upcoming`` (the calls it has lined up, this one included), what
    the scope earns in ``HOLD_SECONDS`` at its effective ``rate``, and what the
    worker gets through in that time at its measured ``pace_seconds`` per call
    (unknown before its second call: one); never less than one.
    """
    if upcoming <= 1 or pace_seconds is None:
        return 1
    by_rate = int(rate * HOLD_SECONDS)
    by_pace = int(HOLD_SECONDS / max(pace_seconds, 1e-4))
    return max(1, min(upcoming, by_rate, by_pace))


@dataclass
class TokenBucket:
    """Client of one scope's bucket; ``acquire`` blocks (outside transactions) until a token."""

    conn: Connection
    scope: str
    sleep: Callable[[float], None] = stoppable_sleep
    clock: Callable[[], float] = time.monotonic
    effective_rate: float = 0.0
    waited_seconds: float = 0.0
    held: int = 0  # tokens taken ahead of this worker's calls
    held_until: float = 0.0  # clock() after which they are dropped
    pace_seconds: float | None = None  # measured time between this worker's calls
    last_grant: float | None = None
    takes: int = 0  # statements that granted tokens
    tokens_taken: int = 0
    largest_take: int = 0
    tokens_dropped: int = 0  # taken ahead but never used (expired, or told to slow down)

    @classmethod
    def for_remote(cls, conn: Connection, remote: RemoteSpec) -> TokenBucket:
        """Create or update the scope from the policy, then return a client for it."""
        conn.execute(
            query("limiter_ensure"),
            {
                "scope": remote.scope,
                "rate": remote.rate_per_second,
                "min_rate": max(0.01, remote.rate_per_second / 100),
                "burst": remote.burst,
                "recovery_seconds": remote.recovery_seconds,
            },
        )
        return cls(conn, remote.scope)

    def try_take(self, wanted: int = 1) -> tuple[int, float]:
        """One attempt at up to ``wanted`` tokens: (tokens granted, seconds to wait if none)."""
        row = self.conn.execute(
            query("limiter_take"), {"scope": self.scope, "wanted": wanted}, prepare=True
        ).fetchone()
        assert row is not None
        self.effective_rate = float(row["effective_rate"])
        return int(row["granted"]), float(row["wait_seconds"])

    def acquire(
        self,
        deadline: float,
        on_wait: Callable[[], None] | None = None,
        max_pause: float = MAX_SINGLE_WAIT_SECONDS,
        upcoming: int = 1,
    ) -> bool:
        """Wait for a token until ``deadline`` (a ``clock()`` value); False if it passes.

        ``upcoming`` is how many calls the worker has lined up, this one
        included: see :func:`tokens_to_take`. ``on_wait`` runs before each pause of
        at most ``max_pause`` seconds (the worker renews its leases there, so it
        pauses less than a renewal interval).
        """
        now = self.clock()
        if self.last_grant is not None:
            gap = now - self.last_grant
            self.pace_seconds = (
                gap
                if self.pace_seconds is None
                else PACE_SMOOTHING * gap + (1 - PACE_SMOOTHING) * self.pace_seconds
            )
        if self.held and now <= self.held_until:
            self.held -= 1
            self.last_grant = now
            return True
        self.drop_held()
        while True:
            asked = self.clock()  # before the grant: a hold never outlives HOLD_SECONDS
            wanted = tokens_to_take(upcoming, self.effective_rate, self.pace_seconds)
            granted, wait = self.try_take(wanted)
            if granted:
                self.takes += 1
                self.tokens_taken += granted
                self.largest_take = max(self.largest_take, granted)
                self.held, self.held_until = granted - 1, asked + HOLD_SECONDS
                self.last_grant = self.clock()
                return True
            now = self.clock()
            if now + wait > deadline:
                return False
            pause = max(0.01, min(wait, MAX_SINGLE_WAIT_SECONDS, max_pause))
            if on_wait is not None:
                on_wait()
            self.waited_seconds += pause
            self.sleep(pause)
            if stop_requested():  # SIGTERM: the call this token was for never starts
                return False
            self.last_grant = None  # a wait is not this worker's pace

    def drop_held(self) -> None:
        """Give up tokens taken ahead (expired, or told to slow down): never handed on."""
        self.tokens_dropped += self.held
        self.held = 0

    def pause(self, seconds: float) -> None:
        """Close the scope for ``seconds`` without lowering its rate (the API is down)."""
        self.drop_held()
        self.conn.execute(query("limiter_pause"), {"scope": self.scope, "seconds": seconds})

    def throttle(self, retry_after_seconds: float) -> float:
        """Report a 429: close the scope for ``retry_after_seconds``; returns the new rate."""
        self.drop_held()
        row = self.conn.execute(
            query("limiter_throttle"), {"scope": self.scope, "seconds": retry_after_seconds}
        ).fetchone()
        self.effective_rate = float(row["effective_rate"]) if row else self.effective_rate
        log.warning(
            "limiter %s: rate limited by the API; closed for %.1fs, effective rate now %.2f/s",
            self.scope,
            retry_after_seconds,
            self.effective_rate,
        )
        return self.effective_rate
