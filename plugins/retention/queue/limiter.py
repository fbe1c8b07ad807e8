"""A token bucket kept in Postgres, shared by every worker of a limiter scope.

However many tasks, workers and DAGs call the same API, they take tokens from
one row of ``retention.rate_limiters``, so together they stay within
``rate_per_second`` plus ``burst``: in any interval of ``t`` seconds, at most
``rate × t + burst`` calls, the bound of an API with the same rate and burst.
Taking tokens is one short statement; waiting happens in Python, never inside
a transaction.

**Taking ahead, inside the bucket.** A worker that calls fast takes a few
tokens in one statement and keeps them for at most the scope's hold (see
:func:`hold_seconds`) from before the statement began: as many as the scope
earns in that time at its effective rate, and as this worker calls in it at
its measured pace (:func:`tokens_to_take`). At a low rate, or against a slow
API, that is one token per statement. Tokens it has not used in time, or holds
when it is told to slow down (its own 429, an outage), are dropped, never
handed on. A token is counted when it is granted, but its call may go out up
to a hold later, after the bucket has refilled behind it: so the bucket holds
at most ``burst − rate × hold`` tokens, and the ``rate × hold`` left over is the
reserve that tokens taken ahead draw on. The bound: the calls of an interval
``[a, b]`` are the tokens granted in it, at most the bucket's level at ``a`` plus
``rate × (b − a)``, and the tokens granted before ``a`` but used in it. Those
were granted within a hold before ``a``, when the bucket held at most
``burst − rate × hold`` and earned at most ``rate × hold`` more; whatever of
that is not still in the bucket at ``a`` was granted, so level plus tokens
outstanding at ``a`` is at most ``burst``, and the calls at most
``rate × (b − a) + burst``, timed where the workers start them (a take whose
statement returns after the hold is late, as a call the network delays).
Before, the bucket held the whole burst, so calls could reach
``rate × (t + 0.05 s) + burst``: a burst past an API with the same limits, a
429, and half the rate for a minute. A Retry-After closes the scope
to new grants at once; calls on tokens granted before it can still go out
within the hold, as a call already in flight would.

**A 429 lowers the rate to what the API admitted.** The configured rate is a
ceiling. A 429 the bucket allowed closes the scope until Retry-After and, at
most once a second (simultaneous 429s of several workers are one signal),
lowers the effective rate. The scope counts its grants while it is busy:
since it last reopened, or last had a full bucket. Whatever the API's bucket
held when that began (at most ``burst``, if the policy's burst is the API's),
the API admitted at least ``(grants − burst − 1) / seconds`` calls a second
since (the refused call left out), and the rate drops to that, never below
half. The count is trusted when it reaches half a burst beyond the burst, so
that the API's refill, not what it had stored, paced those calls; otherwise
(too few calls, or a spell too idle, to tell) the rate halves, as before. A
single 429 after a busy spell at the API's own limit so costs its Retry-After
and about ``burst / seconds`` of rate, not half the rate for
``recovery_seconds``; an API whose real limit is lower is learned in one or
two 429s (half the rate, then the measured one), not in a halving per 429.
The rate climbs back at ``rate_per_second / recovery_seconds`` per second up to
what the last 429 measured (``admitted_rate``), and four times more slowly
above it: near the API's limit, probing for more costs a 429 only every
``√(8 × burst × recovery_seconds / rate_per_second)`` seconds (about 10 s at
100/s, a burst of 20 and the default 60 s), instead of the every 5 s that
the same climb at full pace would cost, each 429 losing its Retry-After.
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


def hold_seconds(rate: float, burst: int) -> float:
    """How long a scope's workers may keep tokens taken ahead: ``HOLD_SECONDS`` at most.

    What the scope earns in the hold (``rate × hold``) is kept out of its bucket
    as the take-ahead's reserve, so it is at most half the burst: the other half
    stays an instant burst, as the policy asked. A reserve under two tokens would
    allow no take of two: then there is no hold, and no reserve.
    """
    reserve = min(rate * HOLD_SECONDS, burst / 2)
    return reserve / rate if reserve >= 2 else 0.0


def tokens_to_take(
    upcoming: int, rate: float, pace_seconds: float | None, hold: float = HOLD_SECONDS
) -> int:
    """How many tokens a worker asks for in one statement: what it calls within ``hold``.

    At most ``upcoming`` (the calls it has lined up, this one included), what
    the scope earns in ``hold`` seconds at its effective ``rate``, and what the
    worker gets through in that time at its measured ``pace_seconds`` per call
    (unknown before its second call: one); never less than one.
    """
    if upcoming <= 1 or pace_seconds is None:
        return 1
    by_rate = int(rate * hold)
    by_pace = int(hold / max(pace_seconds, 1e-4))
    return max(1, min(upcoming, by_rate, by_pace))


@dataclass
class TokenBucket:
    """Client of one scope's bucket; ``acquire`` blocks (outside transactions) until a token."""

    conn: Connection
    scope: str
    sleep: Callable[[float], None] = stoppable_sleep
    clock: Callable[[], float] = time.monotonic
    hold: float = 0.0  # how long tokens taken ahead may be kept (0: none taken ahead)
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
        hold = hold_seconds(remote.rate_per_second, remote.burst)
        conn.execute(
            query("limiter_ensure"),
            {
                "scope": remote.scope,
                "rate": remote.rate_per_second,
                "min_rate": max(0.01, remote.rate_per_second / 100),
                "burst": remote.burst,
                "recovery_seconds": remote.recovery_seconds,
                "hold_seconds": hold,
            },
        )
        return cls(conn, remote.scope, hold=hold)

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
            asked = self.clock()  # before the grant: a hold never outlives the scope's hold
            wanted = tokens_to_take(upcoming, self.effective_rate, self.pace_seconds, self.hold)
            granted, wait = self.try_take(wanted)
            if granted:
                self.takes += 1
                self.tokens_taken += granted
                self.largest_take = max(self.largest_take, granted)
                self.held, self.held_until = granted - 1, asked + self.hold
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
        """Report a 429: close the scope for ``retry_after_seconds``; returns the new rate
        (what the API admitted while the scope was busy, or half: see the module)."""
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
