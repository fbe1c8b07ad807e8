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
reserve that tokens taken ahead draw on (``rate`` the configured one, also
while the headers below set a slower pace: one answer may raise it again
within a hold). The bound: the calls of an interval
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
lowers the effective rate; a 429 answered while the scope is closed (by a 429,
an outage pause, or headers saying nothing is left) is for a call granted
before the close, and lowers nothing. The scope counts its grants while it is
busy: since it last reopened, or last had a full bucket. Whatever the API's bucket
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

**The API's own headers.** An API that says its limits in headers
(``retention.queue.rate_headers``) sets the pace itself
(:meth:`TokenBucket.follow`): with calls left and seconds to the reset known,
the scope's ceiling is ``remaining ÷ seconds`` (never above the configured
rate) until the reset, written to the scope's row so every worker paces by it;
none left closes the scope until the reset. After the reset, with no newer
headers, the ceiling falls back to the configured rate (an ``auto`` scope
keeps the last pace it learned). Headers that were malformed or contradictory
are ignored and remembered once per pass for the run summary. No single answer
steers or closes the scope for longer than a Retry-After may
(``MAX_HEADER_SECONDS``), nor paces it below one call in that time
(:func:`header_pace`): an API whose reset is a year away, or whose numbers
overflow, costs at most an hour, and the next answer says more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.policy.model import RemoteSpec
from retention.queue.classify import MAX_RETRY_AFTER_SECONDS
from retention.queue.rate_headers import Quota, QuotaProblem
from retention.stopping import stop_requested, stoppable_sleep

log = logging.getLogger(__name__)

MAX_SINGLE_WAIT_SECONDS = 1.0
HOLD_SECONDS = 0.05  # longest a worker keeps tokens it took ahead of its calls
PACE_SMOOTHING = 0.3  # weight of the newest gap between calls in the measured pace
# A pace from the headers within this share of the scope's rate is not written again…
FOLLOW_TOLERANCE = 0.05
# …unless this long has passed since this worker last wrote one (so the reset moment on
# the scope's row stays current for workers that start later).
FOLLOW_REFRESH_SECONDS = 1.0
# A reset of 0 s: headers count whole seconds, so the quota resets within the next one.
ZERO_RESET_SECONDS = 1.0
# The longest one answer's headers steer the scope, or close it when nothing is left: a
# Retry-After's cap. A reset further away (a daily quota, a far epoch) still sets the pace,
# but the scope hears again within this time, or falls back.
MAX_HEADER_SECONDS = MAX_RETRY_AFTER_SECONDS
# The slowest pace headers set: one call per MAX_HEADER_SECONDS, so a scope told "one call
# left, reset in a year" still asks again within the hour, never stays shut for the year.
SLOWEST_HEADER_PACE = 1 / MAX_HEADER_SECONDS


@dataclass(frozen=True)
class HeaderPace:
    """What one reading of the headers does to the scope (see :func:`header_pace`)."""

    pace: float | None  # calls per second until ``steer_seconds`` pass (None: none left)
    steer_seconds: float  # how long the pace holds, or the scope stays closed


def header_pace(remaining: int, reset_seconds: float, ceiling: float | None) -> HeaderPace:
    """The pace an API's quota sets: what is left spent by the reset (``remaining ÷
    reset_seconds``), never above ``ceiling`` (the configured rate) nor below
    :data:`SLOWEST_HEADER_PACE`, held (or, none left, the scope closed) until the reset or
    for :data:`MAX_HEADER_SECONDS`, whichever comes first. A reset of 0 is a second away."""
    reset = reset_seconds if reset_seconds > 0 else ZERO_RESET_SECONDS
    steer = min(reset, MAX_HEADER_SECONDS)
    if remaining <= 0:
        return HeaderPace(None, steer)
    pace = max(remaining / reset, SLOWEST_HEADER_PACE)
    return HeaderPace(pace if ceiling is None else min(pace, ceiling), steer)


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
    configured_rate: float | None = None  # the policy's ceiling (None: not known here)
    learned_until: float | None = None  # clock() when the headers' quota resets
    followed_at: float | None = None  # clock() when this worker last wrote a pace
    followed_pace: float | None = None  # the pace it wrote then (None: a close, or none)
    paces_followed: int = 0  # statements that wrote the headers' pace to the scope
    header_problem: str | None = None  # the first ignored headers of this pass

    @classmethod
    def for_remote(cls, conn: Connection, remote: RemoteSpec) -> TokenBucket:
        """Create or update the scope from the policy, then return a client for it."""
        hold = hold_seconds(remote.rate_ceiling, remote.burst)
        row = conn.execute(
            query("limiter_ensure"),
            {
                "scope": remote.scope,
                "rate": remote.starting_rate,
                "configured_rate": remote.rate_ceiling,
                "auto_rate": remote.auto_rate,
                "min_rate": max(0.01, remote.rate_ceiling / 100),
                "burst": remote.burst,
                "recovery_seconds": remote.recovery_seconds,
                "hold_seconds": hold,
            },
        ).fetchone()
        bucket = cls(conn, remote.scope, configured_rate=remote.rate_ceiling, hold=hold)
        left = row["learned_seconds_left"] if row else None
        if left is not None and left > 0:  # headers another worker followed: fall back too
            bucket.learned_until = bucket.clock() + float(left)
        return bucket

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

    def follow(self, quota: Quota) -> None:
        """Pace the scope by what an answer's rate-limit headers said of the API's quota.

        A reading sets the scope's ceiling to its pace (:func:`header_pace`: ``remaining ÷
        seconds to the reset``, within bounds) until the reset (at most
        ``MAX_HEADER_SECONDS``), or closes the scope until then when nothing is left; it
        is written only when it changes the pace this worker last wrote by more than
        ``FOLLOW_TOLERANCE``, or ``FOLLOW_REFRESH_SECONDS`` after it last wrote one, so an
        API whose every answer carries headers costs a few statements a second, not one
        per call (nor during a 429's recovery). No headers after the reset: the
        ceiling falls back (see the module's docstring). A problem is logged and
        remembered on the scope once per pass, and the configured rate stays.
        """
        if isinstance(quota, QuotaProblem):
            self._ignore(quota)
            return
        now = self.clock()
        if quota is None:
            if self.learned_until is not None and now >= self.learned_until:
                self.learned_until = None
                self.conn.execute(query("limiter_headers_expired"), {"scope": self.scope})
            return
        heard = header_pace(quota.remaining, quota.reset_seconds, self.configured_rate)
        # compared with the pace this worker last wrote, not the effective rate: after a
        # 429 that rate climbs back below the pace, and would make every answer a write
        last = self.followed_pace
        changed = (
            heard.pace is None or last is None or abs(heard.pace - last) > FOLLOW_TOLERANCE * last
        )
        stale = self.followed_at is None or now - self.followed_at >= FOLLOW_REFRESH_SECONDS
        if not changed and not stale:
            return
        row = self.conn.execute(
            query("limiter_follow_headers"),
            {
                "scope": self.scope,
                "remaining": quota.remaining,
                "pace": heard.pace,
                "steer_seconds": heard.steer_seconds,
            },
        ).fetchone()
        if row is None:
            return
        if not self.paces_followed:
            log.info(
                "limiter %s: the API's rate-limit headers set the pace: %s; rate now %.2f/s",
                self.scope,
                quota.described,
                float(row["effective_rate"]),
            )
        self.paces_followed += 1
        self.followed_at, self.followed_pace = now, heard.pace
        self.effective_rate = float(row["effective_rate"])
        self.learned_until = now + max(0.0, float(row["learned_seconds_left"]))
        if not quota.remaining:  # closed until the reset: what this worker holds is not used
            self.drop_held()

    def _ignore(self, problem: QuotaProblem) -> None:
        """Headers that say nothing trustworthy: the pace stays; said once per pass."""
        if self.header_problem is not None:
            return
        self.header_problem = str(problem)
        log.warning(
            "limiter %s: malformed or contradictory rate-limit headers ignored: %s",
            self.scope,
            problem,
        )
        self.conn.execute(
            query("limiter_header_problem"), {"scope": self.scope, "problem": str(problem)}
        )
