"""Progress lines for long loops: done of expected, rate, time left and time throttled.

A window or a planner that works for minutes must not be silent between its
first and last log line: an operator reading the task log wants to know how
far it is, how fast it goes, when it will end and how much of its time went to
pauses (the health gate, pacing, the API's rate limit). :class:`Progress` is
fed after each batch and logs one line at most every ``every`` seconds
(``RETENTION_PROGRESS_SECONDS``, default 10), plus one when it finishes.

Lines lead with the short label (``tenant 7 · ids 1000–1999``) and put the
numbers right after it, so they stay on screen in Airflow's log view; the
clock is injectable, so the unit tests never sleep.

:class:`PhaseTimer` does the same for work made of a few slow steps (the
planner's probes): each step logs what it found and how long it took, and a
loop inside a step logs a heartbeat every ``every`` seconds.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

PROGRESS_SECONDS_VARIABLE = "RETENTION_PROGRESS_SECONDS"
DEFAULT_PROGRESS_SECONDS = 10.0


def progress_interval(environ: Mapping[str, str] | None = None) -> float:
    """Seconds between progress lines: ``RETENTION_PROGRESS_SECONDS``, else 10.

    Read when a loop starts (never at import), so tests and operators can
    change it without reloading anything. A value that is not a positive
    number is an error naming the variable, not a silent default.
    """
    raw = (os.environ if environ is None else environ).get(PROGRESS_SECONDS_VARIABLE)
    if raw is None or not raw.strip():
        return DEFAULT_PROGRESS_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0:  # also rejects NaN
        raise ValueError(
            f"{PROGRESS_SECONDS_VARIABLE}={raw!r}: expected a positive number of seconds "
            f"between progress lines (default {DEFAULT_PROGRESS_SECONDS:g})"
        )
    return seconds


def duration(seconds: float) -> str:
    """``40 ms``, ``2.4 s``, ``12 s``, ``3 min 05 s``, ``2 h 07 min``: short, for a log line."""
    if seconds < 0.9995:  # what would round to 1000 ms reads as 1.0 s
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 window``, ``12 windows``, ``1,200 rows``, ``3 batches`` (``nouns`` if not +s)."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def rate(per_second: float, unit: str = "") -> str:
    """``1,234 rows/s``, ``12.5 rows/s``, ``0.25/s``: three significant figures at most."""
    per = f" {unit}/s" if unit else "/s"
    if per_second >= 100:
        return f"{per_second:,.0f}{per}"
    if per_second >= 10:
        return f"{per_second:.1f}{per}"
    return f"{per_second:.2f}{per}"


def throttle_words(reasons: Mapping[str, float]) -> str:
    """``throttled 4.2 s (paced 3.0 s, replica_lag 1.2 s)``, or ``not throttled``."""
    spent = {k: v for k, v in reasons.items() if v > 0}
    total = sum(spent.values())
    if total <= 0:
        return "not throttled"
    parts = ", ".join(f"{k} {duration(v)}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1]))
    return f"throttled {duration(total)} ({parts})"


@dataclass
class Progress:
    """Logs how far one loop is: fed after each batch, a line every ``every`` s and at the end.

    ``expected`` is what the loop expects to do (rows: the statistics' estimate,
    shown with ``~``; operations: an exact count); None when nothing is known,
    and then no percentage or ETA is shown. The rate is over wall-clock time,
    throttling included, because that is the rate the ETA will see.
    """

    label: str
    expected: int | None
    unit: str = "rows"
    estimate: bool = True  # ``expected`` is an estimate (shown as ~N)
    every: float = field(default_factory=progress_interval)
    clock: Callable[[], float] = time.monotonic
    logger: logging.Logger = log
    done: int = 0
    throttled: dict[str, float] = field(default_factory=dict)
    started: float = field(init=False)
    _last_line: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self._last_line = self.clock()

    def update(
        self, done: int, throttled: Mapping[str, float] | None = None, extra: str = ""
    ) -> bool:
        """Record the total done so far (and time throttled, by reason); log when due.

        Returns whether a line was logged.
        """
        self.done = done
        if throttled is not None:
            self.throttled = dict(throttled)
        now = self.clock()
        if now - self._last_line < self.every:
            return False
        self._last_line = now
        self.logger.info("%s", self.line(now, extra=extra))
        return True

    def finish(
        self,
        verb: str = "done",
        extra: str = "",
        *,
        done: int | None = None,
        throttled: Mapping[str, float] | None = None,
    ) -> str:
        """Log (and return) the final line, with the last figures if given."""
        if done is not None:
            self.done = done
        if throttled is not None:
            self.throttled = dict(throttled)
        text = self.line(self.clock(), final=True, verb=verb, extra=extra)
        self.logger.info("%s", text)
        return text

    def line(self, now: float, *, final: bool = False, verb: str = "done", extra: str = "") -> str:
        """``<label>: done 1,200 of ~5,000 rows (24%), 120 rows/s, ETA 32 s, not throttled``."""
        return progress_line(
            self.label,
            self.done,
            self.expected,
            max(0.0, now - self.started),
            self.throttled,
            unit=self.unit,
            estimate=self.estimate,
            final=final,
            verb=verb,
            extra=extra,
        )


def progress_line(
    label: str,
    done: int,
    expected: int | None,
    elapsed: float,
    throttled: Mapping[str, float],
    *,
    unit: str = "rows",
    estimate: bool = True,
    final: bool = False,
    verb: str = "done",
    extra: str = "",
) -> str:
    """One progress line (pure); a ``final`` one gives the total time instead of an ETA.

    ``<label>: <verb> <done> of <expected> <unit> (<share>)[ in <time>], <rate>,
    [ETA <time>, ]<throttled>[, <extra>]``: the label first, then the numbers.
    """
    speed = done / elapsed if elapsed > 0 else 0.0
    of, share = "", ""
    if expected is not None:
        of = f" of {'~' if estimate else ''}{expected:,}"
        if expected > 0:
            share = f" ({min(999, round(100 * done / expected))}%)"
    parts = [f"{label}: {verb} {done:,}{of} {unit}{share}"]
    if final:
        parts[0] += f" in {duration(elapsed)}"
    parts.append(rate(speed, unit))
    if not final and expected is not None:
        left = expected - done
        if left <= 0:
            parts.append("ETA now (past the estimate)" if estimate and left < 0 else "ETA now")
        elif speed <= 0:
            parts.append("ETA unknown")
        else:
            parts.append(f"ETA {duration(left / speed)}")
    parts.append(throttle_words(throttled))
    if extra:
        parts.append(extra)
    return ", ".join(parts)


@dataclass
class PhaseTimer:
    """Times the steps of a slow piece of work made of a few statements (the planner).

    ``with timer.step("probing the eligible key range") as step:`` logs
    ``<label>: <what> took 1.2 s[: <found>]`` when the step ends, where
    ``step.found`` is what the step learned (set inside the block): at INFO
    when the step took ``quiet_below`` seconds or more (or failed), else at
    DEBUG, so a plan of a small table is one closing line with
    :meth:`summary`, and a slow probe of a big table says which it was. A loop
    inside a step calls ``step.tick(i, n)`` and gets a heartbeat line every
    ``every`` seconds. :attr:`steps` keeps each step's seconds.
    """

    label: str
    every: float = field(default_factory=progress_interval)
    clock: Callable[[], float] = time.monotonic
    logger: logging.Logger = log
    quiet_below: float = 1.0  # a step quicker than this (that did not fail) logs at DEBUG
    steps: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def step(self, what: str) -> Iterator[Step]:
        current = Step(self, what, self.clock())
        try:
            yield current
        except BaseException:
            current.completed = False
            raise
        finally:
            took = self.clock() - current.started
            self.steps[what] = self.steps.get(what, 0.0) + took
            found = f": {current.found}" if current.found else ""
            verb = "took" if current.completed else "failed after"
            level = logging.DEBUG if current.completed and took < self.quiet_below else logging.INFO
            self.logger.log(level, "%s: %s %s %s%s", self.label, what, verb, duration(took), found)

    def summary(self) -> str:
        """``table 4 ms, probes 1.2 s, …``: every step's time, for the closing line."""
        return ", ".join(f"{what} {duration(took)}" for what, took in self.steps.items())


@dataclass
class Step:
    """One running step of a :class:`PhaseTimer`."""

    timer: PhaseTimer
    what: str
    started: float
    found: str = ""
    completed: bool = True
    _last_line: float | None = None

    def tick(self, done: int, total: int | None, unit: str = "probes") -> bool:
        """A heartbeat inside a loop of the step; logs every ``every`` seconds."""
        now = self.timer.clock()
        last = self.started if self._last_line is None else self._last_line
        if now - last < self.timer.every:
            return False
        self._last_line = now
        of = f" of {total:,}" if total is not None else ""
        self.timer.logger.info(
            "%s: %s: %s%s %s, %s so far",
            self.timer.label,
            self.what,
            f"{done:,}",
            of,
            unit,
            duration(now - self.started),
        )
        return True
