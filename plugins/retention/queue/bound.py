"""What bounds a drain: the API, the pool's slots, or the database (one pure rule).

A remote policy's calls go as fast as the slowest of three things lets them:

- **upstream**: the limiter has no token for the next call, or its scope is closed
  (the configured rate, a 429's Retry-After, an outage pause). More slots would only
  wait longer; the limiter's effective rate says what the API allows;
- **capacity**: every worker is busy with its calls while the limiter is open, and the
  pool has no free slot for another worker. Little's law gives the slots the rate needs:
  ``rate × latency`` calls are in flight on average, plus a fifth of headroom
  (:func:`slots_for`);
- **database**: the gate paused (a ``health:`` limit, the pause switch) or paced.

Each worker pass measures where its time went (:class:`PassTime`, seconds that add
up across passes), sampling Airflow's pool stats on the way (:class:`PoolWatch`), and
:func:`judge` says which one bound it and what to tune. A run's verdict is the same
rule over the sum of its passes' figures, so each share in it is weighted by the time
of the passes it came from. Pure: the clock, the pool reader and the figures are
passed in.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from retention.metrics import BOUND_CODES
from retention.policy.model import Policy
from retention.summary import BoundEvidence

log = logging.getLogger(__name__)

# A wait that takes this share of the workers' time bounds the drain (the larger of the
# limiter's and the database's, when both do).
WAIT_SHARE = 0.25
# The pool counts as full when it had no free slot for another task this share of the time.
POOL_BUSY_SHARE = 0.8
# Workers count as busy (with calls, claims and records) at this share of their time.
WORKING_SHARE = 0.5
HEADROOM = 1.2  # Little's law's slots, plus a fifth: latency varies, and calls are not all
POOL_SAMPLE_SECONDS = 1.0  # at most one read of the pool's stats per second and worker
# …and reads of the pool's stats take at most this share of a worker's time: each read
# blocks the worker's calls, so a slow api-server spaces them out rather than slowing the
# drain (a 300 ms read once a second halved a fast drain's rate).
POOL_SAMPLE_SHARE = 0.05


class Bound(StrEnum):
    """What held a drain back (the ``bound_by`` gauge sends :attr:`code`)."""

    UNBOUND = "unbound"  # nothing did: the work ran out before any limit
    UPSTREAM = "upstream"
    CAPACITY = "capacity"
    DATABASE = "database"
    UNKNOWN = "unknown"  # nothing was measured (no pass ran)

    @property
    def code(self) -> int | None:
        """The ``bound_by`` gauge's number (``metrics.BOUND_CODES``); None: not sent."""
        return BOUND_CODES.get(self.value)


@dataclass(frozen=True, kw_only=True)
class PassTime:
    """Where the workers' time went in one pass (or in the summed passes of a run).

    Every figure adds up across passes (``+``): seconds of worker time, the number of
    calls, and two products whose means are read back by dividing (the pool's slots ×
    the seconds they were sampled; the limiter's effective rate × the pass's seconds).
    ``pool_unread`` says why the pool's stats were not read, when they were not.
    """

    seconds: float = 0.0  # the passes' wall time, summed over workers
    calling: float = 0.0  # in calls, from sending to the answer
    calls: int = 0
    limiter: float = 0.0  # waiting for a token: none left, or the scope closed
    database: float = 0.0  # the gate's pauses and pacing
    idle: float = 0.0  # with nothing it could call (a claim that found no due job)
    pool_sampled: float = 0.0  # covered by samples of the pool's stats
    pool_busy: float = 0.0  # of those, with no slot free for another task
    pool_slot_seconds: float = 0.0  # the pool's slots × the seconds they were sampled
    rate_seconds: float = 0.0  # the limiter's effective rate × the pass's seconds
    pool_unread: str | None = None

    def __add__(self, other: PassTime) -> PassTime:
        summed: dict[str, Any] = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in dataclasses.fields(self)
            if f.name != "pool_unread"
        }
        return PassTime(**summed, pool_unread=other.pool_unread or self.pool_unread)

    def to_json(self) -> dict[str, Any]:
        """The figures as stored (``retention.windows.drain_time``, a drain pass's ``time``)."""
        data: dict[str, Any] = {
            f.name: round(getattr(self, f.name), 4)
            for f in dataclasses.fields(self)
            if f.name != "pool_unread"
        }
        if self.pool_unread:
            data["pool_unread"] = self.pool_unread
        return data

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> PassTime:
        """Figures read back (a key a newer writer added is left out, a missing one is 0)."""
        if not data:
            return cls()
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in data and data[f.name] is not None:
                value = data[f.name]
                values[f.name] = (
                    str(value)
                    if f.name == "pool_unread"
                    else int(value)
                    if f.name == "calls"
                    else float(value)
                )
        return cls(**values)


@dataclass(frozen=True)
class DrainSetting:
    """What the verdict compares the figures with: the pool, a task's slots, the rate."""

    pool: str
    task_slots: int  # slots one window (or drain) task takes: pool_slots
    # the policy's rate (with ``auto``, its max_rate_per_second): the pace the pool should
    # keep up with
    rate_per_second: float

    @classmethod
    def of(cls, policy: Policy) -> DrainSetting:
        assert policy.remote is not None
        return cls(policy.remote.pool, policy.pool_slots, policy.remote.rate_ceiling)


def slots_for(rate_per_second: float, latency_seconds: float, task_slots: int = 1) -> int:
    """The pool's slots that keep ``rate_per_second`` calls going at ``latency_seconds`` each.

    Little's law: ``rate × latency`` calls are in flight on average; each worker has one
    in flight and takes ``task_slots`` slots; :data:`HEADROOM` adds a fifth.
    """
    workers = math.ceil(round(rate_per_second * latency_seconds * HEADROOM, 9))
    return max(1, workers) * task_slots


def judge(time: PassTime, setting: DrainSetting) -> BoundEvidence:
    """The verdict on figures of one pass or of a run, with what to tune, in one sentence."""
    seconds = time.seconds
    if seconds <= 0:
        return BoundEvidence(
            verdict=Bound.UNKNOWN.value,
            says="unknown: no pass of the drain was measured",
            pool=setting.pool,
            pool_unread=time.pool_unread,
        )

    def share(part: float) -> float:
        return min(1.0, max(0.0, part / seconds))

    limiter, database, idle = share(time.limiter), share(time.database), share(time.idle)
    working = max(0.0, 1.0 - limiter - database - idle)
    pool_busy = time.pool_busy / time.pool_sampled if time.pool_sampled > 0 else None
    slots = round(time.pool_slot_seconds / time.pool_sampled) if time.pool_sampled > 0 else None
    latency = time.calling / time.calls if time.calls else None
    rate = time.rate_seconds / seconds if time.rate_seconds > 0 else None
    needed = (
        slots_for(setting.rate_per_second, latency, setting.task_slots)
        if latency is not None
        else None
    )
    verdict, says = _verdict(
        setting,
        limiter=limiter,
        database=database,
        idle=idle,
        working=working,
        pool_busy=pool_busy,
        slots=slots,
        latency=latency,
        rate=rate,
        needed=needed,
        unread=time.pool_unread,
    )
    return BoundEvidence(
        verdict=verdict.value,
        says=says,
        limiter_share=round(limiter, 3),
        waiting_for_work_share=round(idle, 3),
        pool_busy_share=None if pool_busy is None else round(pool_busy, 3),
        database_share=round(database, 3),
        working_share=round(working, 3),
        mean_call_ms=None if latency is None else round(latency * 1000, 1),
        effective_rate=None if rate is None else round(rate, 3),
        rate_per_second=setting.rate_per_second,
        pool=setting.pool,
        pool_slots=slots,
        slots_needed=needed if verdict is Bound.CAPACITY else None,
        pool_unread=None if pool_busy is not None else time.pool_unread,
        worker_seconds=round(seconds, 3),
        calls=time.calls,
    )


def log_verdict(label: str, evidence: BoundEvidence) -> None:
    """Log a pass's verdict under this module's logger (``retention.queue.bound``), apart
    from the pass's progress lines; a pass that neither called nor waited says nothing."""
    if evidence.calls or evidence.limiter_share:
        log.info("%s: this pass was %s", label, evidence.says)


def _verdict(
    setting: DrainSetting,
    *,
    limiter: float,
    database: float,
    idle: float,
    working: float,
    pool_busy: float | None,
    slots: int | None,
    latency: float | None,
    rate: float | None,
    needed: int | None,
    unread: str | None,
) -> tuple[Bound, str]:
    """The rule, in order: a wait that took the time; busy workers with a full pool (or,
    the pool unread, busy workers alone); else nothing held the drain back."""
    if max(limiter, database) >= WAIT_SHARE:
        if limiter >= database:
            allowed = (
                f"the API allows about {_rate(rate)}/s (the limiter's effective rate; "
                f"rate_per_second is {_rate(setting.rate_per_second)}/s)"
                if rate is not None
                else "the limiter's effective rate was not read"
            )
            return Bound.UPSTREAM, (
                f"upstream-bound: the limiter had no token or was closed {_pct(limiter)} of "
                f"the time; {allowed}: nothing to tune here"
            )
        return Bound.DATABASE, (
            f"database-bound: pauses and pacing took {_pct(database)} of the time (the "
            "policy's health: limits or the pause switch; pause_reasons says which)"
        )
    pool = f"pool `{setting.pool}`"
    if latency is not None and needed is not None and working >= WORKING_SHARE:
        pace = f"at {latency * 1000:.0f} ms per call, {_rate(setting.rate_per_second)}/s needs"
        if pool_busy is not None and pool_busy >= POOL_BUSY_SHARE:
            if slots is not None and slots >= needed:
                # Full, but with the slots the rate needs: the calls keep up with the rate
                # (a drain at its rate fills its pool); more slots would not go faster.
                return Bound.UNBOUND, (
                    f"not bound: {pool} has {slots} slots, busy {_pct(pool_busy)} of the "
                    f"time, and {pace} {needed}: enough for the rate"
                )
            return Bound.CAPACITY, (
                f"capacity-bound: {pool} has {slots} slots, busy {_pct(pool_busy)} of the "
                f"time; {pace} {needed}"
            )
        if pool_busy is None:
            return Bound.CAPACITY, (
                f"capacity-bound: workers were busy {_pct(working)} of the time with the "
                f"limiter open; {pace} {needed} slots in {pool} (its own busy share is "
                f"unknown: {unread or 'not read'})"
            )
    if pool_busy is not None and pool_busy < POOL_BUSY_SHARE:
        return Bound.UNBOUND, (
            f"not bound: {pool} had a free slot {_pct(1 - pool_busy)} of the time and the "
            "limiter was open: the drain kept up with its work"
        )
    return Bound.UNBOUND, (
        f"not bound: workers waited for work {_pct(idle)} of the time and the limiter was "
        "open: the drain kept up with its work"
    )


def _pct(share: float) -> str:
    return f"{share * 100:.0f}%"


def _rate(rate: float) -> str:
    return f"{rate:.3g}"


@dataclass(frozen=True)
class PoolReading:
    """A pool's stats at one moment: its slots, and those its tasks occupy (running or
    queued, as Airflow counts them)."""

    slots: int  # -1: unlimited
    occupied: int


class PoolWatch:
    """Samples one pool's stats during a pass and holds each sample until the next.

    ``read`` (the Airflow layer's reader of ``GET /api/v2/pools/{pool}``) is called at
    most every ``every_seconds``, and less often when a read is slow, so that reading
    takes at most :data:`POOL_SAMPLE_SHARE` of the worker's time (``clock`` times each
    read); the pool is busy while it has no free slot for another task of ``task_slots``
    slots. The first failed read stops the sampling for the pass
    and says why (``unread``); so does a watch built without a reader.
    """

    def __init__(
        self,
        pool: str,
        task_slots: int,
        read: Callable[[str], PoolReading] | None,
        *,
        unread: str | None = None,
        every_seconds: float = POOL_SAMPLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool = pool
        self.task_slots = task_slots
        self.read = read
        self.unread = unread if read is None else None
        if read is None and unread is None:
            self.unread = "no reader of Airflow's pools"
        self.every_seconds = every_seconds
        self.clock = clock
        self.interval = every_seconds  # grows with the time a read takes
        self.samples = 0
        self.sampled = 0.0
        self.busy = 0.0
        self.slot_seconds = 0.0
        self._last: tuple[float, bool, int] | None = None  # (when, busy, slots)

    def sample(self, now: float) -> None:
        """Read the pool if the last read is ``interval`` old (or there is none)."""
        if self.read is None or self.unread is not None:
            return
        if self._last is not None and now - self._last[0] < self.interval:
            return
        began = self.clock()
        try:
            reading = self.read(self.pool)
        except Exception as failed:  # the verdict falls back; the pass goes on
            self.unread = str(failed) or type(failed).__name__
            self._hold(now)
            self._last = None
            return
        took = max(0.0, self.clock() - began)
        self.interval = max(self.every_seconds, took / POOL_SAMPLE_SHARE)
        self._hold(now)
        self.samples += 1
        busy = reading.slots >= 0 and reading.slots - reading.occupied < self.task_slots
        self._last = (now, busy, reading.slots)

    def close(self, now: float) -> dict[str, Any]:
        """End the pass: the last sample holds until ``now``; the figures of :class:`PassTime`."""
        self._hold(now)
        self._last = None
        return {
            "pool_sampled": self.sampled,
            "pool_busy": self.busy,
            "pool_slot_seconds": self.slot_seconds,
            "pool_unread": self.unread,
        }

    def _hold(self, now: float) -> None:
        if self._last is None:
            return
        when, busy, slots = self._last
        span = max(0.0, now - when)
        self.sampled += span
        self.busy += span if busy else 0.0
        self.slot_seconds += span * max(slots, 0)
        self._last = (now, busy, slots)
