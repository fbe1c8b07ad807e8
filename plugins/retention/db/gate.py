"""The gate every deleter passes between batches: the pause switch and the database's health.

Operators stop a policy without a deploy through the Airflow Variable
``retention_pause`` (``all``, or a comma-separated list of policy names); the
Airflow layer hands the gate a function that reads it, so this layer never
imports Airflow.  The health limits come from the policy's ``health:`` section
(:mod:`retention.db.health`).

The gate looks at most once per ``check_every`` seconds.  When it must pause it
logs the reason once, waits (looking again every ``check_every``) until the
condition clears, logs how long it waited, and adds the pause to its totals,
which the window ledger and the run summary show.  A pause longer than
``max_pause_seconds`` fails the task with the reason; an abort threshold fails
it at once.  Neither loses anything: a retry resumes where the window stopped.

A role without ``pg_monitor`` sees no details of other roles' sessions, so
those read as quiet and harmless; the gate says so once, with the grant that
fixes it, rather than pacing and judging blind in silence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from retention import metrics
from retention.db.connection import Connection
from retention.db.health import (
    CLEAR,
    HealthReading,
    Verdict,
    counted_clients,
    describe_lock_waiters,
    judge,
    read_health,
    sleep_ratio,
)
from retention.policy.model import HealthSpec, TableSpec
from retention.stopping import raise_if_stopping, stop_requested, stoppable_sleep

log = logging.getLogger(__name__)

PAUSE_VARIABLE = "retention_pause"
PACED = "paced"  # the pause reason of time slept by pacing (sleep_ratio, busy_sleep_ratio)
PauseSwitch = Callable[[], str | None]  # the Variable's value now (None: not set)


class PausedTooLong(RuntimeError):
    """A pause outlasted ``health.max_pause_seconds``; the task fails, a retry resumes."""


class HealthAbort(RuntimeError):
    """An abort threshold of ``health:`` was crossed; the task fails at once."""


def _seconds(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def switch_pauses(value: str | None, policy: str) -> bool:
    """Whether the Variable's value pauses this policy: ``all`` or a list naming it."""
    names = {part.strip() for part in (value or "").split(",")}
    return "all" in {n.lower() for n in names} or policy in names


@dataclass
class Gate:
    """Pauses one worker (a window, or a remote pass) while the switch or the database says so."""

    policy: str
    spec: HealthSpec
    table: TableSpec
    switch: PauseSwitch | None = None
    check_every: float = 1.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = stoppable_sleep
    reader: Callable[[Connection, TableSpec], HealthReading] = read_health
    label: str = ""  # what the gate's log lines lead with (a window's label), else the policy
    pauses: int = 0
    paused_seconds: float = 0.0
    paced_seconds: float = 0.0
    reasons: dict[str, float] = field(default_factory=dict)
    _checked_at: float | None = None
    _reading: HealthReading | None = None  # the last look (it paces until the next one)
    _pacing_busy: bool = False  # pacing for other clients now (logged when it changes)
    _said_blind: bool = False  # logged that the role cannot see other roles' sessions
    _switch_value: str | None = None
    _switch_failed: bool = False

    def wait(self, conn: Connection, until: float | None = None) -> bool:
        """Return when the way is clear (True), or at ``until`` while still paused (False).

        Raises :class:`HealthAbort` past an abort threshold and
        :class:`PausedTooLong` when one pause outlasts ``max_pause_seconds``.
        """
        now = self.clock()
        if self._checked_at is not None and now - self._checked_at < self.check_every:
            return True
        verdict = self._look(conn)
        if verdict.clear:
            return True
        started, kind = now, verdict.kind or "unknown"
        if kind == PAUSE_VARIABLE:
            log.warning("%s: paused by %s", self.who, PAUSE_VARIABLE)
        else:
            log.warning("%s: paused: %s%s", self.who, verdict.reason, self._waiters(conn, kind))
        self.pauses += 1
        try:
            while not verdict.clear:
                waited = self.clock() - started
                if waited >= self.spec.max_pause_seconds:
                    raise PausedTooLong(
                        f"policy {self.policy!r}: paused {_seconds(waited)} s: {verdict.reason}. "
                        "Nothing was lost; a retry resumes where this stopped."
                    )
                if until is not None and self.clock() >= until:
                    log.info(
                        "%s: still paused after %.1f s (%s); this pass ends at its time budget",
                        self.who,
                        waited,
                        verdict.reason,
                    )
                    return False
                self.sleep(min(self.check_every, self.spec.max_pause_seconds - waited))
                raise_if_stopping(f"policy {self.policy} (paused)")
                verdict = self._look(conn)
            log.info("%s: resumed after %.1f s paused", self.who, self.clock() - started)
            return True
        finally:
            waited = self.clock() - started
            self.paused_seconds += waited
            self.reasons[kind] = self.reasons.get(kind, 0.0) + waited
            metrics.throttled(self.policy, kind, waited)

    def pace(self, batch_seconds: float) -> None:
        """Sleep a share of the last batch's time (pt-archiver's ``--sleep-coef``): the
        larger of the policy's ``sleep_ratio`` and, while other clients are at work (as
        the last look saw them), its ``busy_sleep_ratio``.

        Time slept counts as paused (reason ``paced``) in the totals, so a window's
        measured rate, which sizes the next run's windows, is its rate while working.
        """
        ratio = sleep_ratio(self._reading, self.spec)
        busy = ratio > self.spec.sleep_ratio
        if busy != self._pacing_busy:
            self._pacing_busy = busy
            clients = counted_clients(self._reading, self.spec)
            if busy:
                log.info(
                    "%s: %d other session(s) at work: sleeping %.1f × each batch's time",
                    self.who,
                    clients,
                    ratio,
                )
            else:
                log.info("%s: no other session at work: pacing back to %.1f ×", self.who, ratio)
        if ratio > 0 and batch_seconds > 0:
            pause = batch_seconds * ratio
            began = self.clock()
            self.sleep(pause)
            if stop_requested():  # woke early for a stop: count only the time slept
                pause = min(pause, max(0.0, self.clock() - began))
            self.paced_seconds += pause
            metrics.throttled(self.policy, PACED, pause)

    def totals(self) -> dict[str, object]:
        """For the window ledger and the run summary."""
        return {
            "pauses": self.pauses,
            "paused_seconds": round(self.paused_seconds + self.paced_seconds, 3),
            "pause_reasons": {k: round(v, 3) for k, v in sorted(self.throttled().items())},
            "paced_seconds": round(self.paced_seconds, 3),
        }

    @property
    def who(self) -> str:
        """What log lines lead with: the window's short label, else the policy."""
        return self.label or f"policy {self.policy}"

    def _waiters(self, conn: Connection, kind: str) -> str:
        """For a pause on blocked sessions: who waits on which retention PID (else "")."""
        if kind != "blocked_sessions":
            return ""
        try:
            named = describe_lock_waiters(conn)
        except psycopg.Error as failed:
            if conn.broken:
                raise
            return f"; could not name them ({type(failed).__name__})"
        return f"; {named}" if named else ""

    def throttled(self) -> dict[str, float]:
        """Seconds paused so far by reason, pacing included (``paced``), for progress lines."""
        reasons = dict(self.reasons)
        if self.paced_seconds:
            reasons[PACED] = self.paced_seconds
        return reasons

    def _look(self, conn: Connection) -> Verdict:
        self._checked_at = self.clock()
        if self._paused_by_switch():
            return Verdict(PAUSE_VARIABLE, f"the Variable {PAUSE_VARIABLE} names this policy")
        self._reading = self.reader(conn, self.table)
        self._say_if_blind(self._reading)
        verdict = judge(self._reading, self.spec, str(self.table))
        if verdict.abort:
            raise HealthAbort(
                f"policy {self.policy!r}: stopped: {verdict.reason}. Nothing was lost; a retry "
                "resumes where this stopped."
            )
        return verdict if not verdict.clear else CLEAR

    def _say_if_blind(self, reading: HealthReading) -> None:
        """Once per gate: the readings miss other roles' sessions, and how to fix it."""
        if reading.sees_all_sessions or self._said_blind:
            return
        self._said_blind = True
        role = reading.role or "<the connection's role>"
        log.warning(
            "%s: role %s cannot see other roles' sessions (%d in this database now): pacing "
            "(busy_sleep_ratio) counts only its own, the transaction-age and lock-wait "
            "checks miss theirs, and standbys' lag reads as none. GRANT pg_monitor TO %s",
            self.who,
            role,
            reading.hidden_sessions,
            role,
        )

    def _paused_by_switch(self) -> bool:
        if self.switch is None:
            return False
        try:
            self._switch_value = self.switch()
            self._switch_failed = False
        except Exception as unreadable:  # keep the last value; say so once
            if not self._switch_failed:
                log.warning(
                    "%s: could not read the Variable %s (%s); keeping its last value %r",
                    self.who,
                    PAUSE_VARIABLE,
                    unreadable,
                    self._switch_value,
                )
            self._switch_failed = True
        return switch_pauses(self._switch_value, self.policy)
