"""The one worker loop of every job kind: claim, wait for a token, send, classify, decide, record.

A worker claims a few due jobs (a short transaction), then for each one waits
for a token of the shared bucket (kinds with a limiter), sends it, classifies
the answer with the kind's table and asks the kind's pure ``decide`` what the
ledger should say. Outcomes of a claimed batch are recorded together by the
kind's completer (a batch completer, as in River): a worker that dies before
that leaves its jobs ``in_flight`` until their leases expire, and the next
claim re-drives them with the same key.

Leases are renewed while the batch is worked; a job whose lease was lost
(reclaimed after it expired) is not worked any further. When the time budget
runs out, or the kind says stop (a credential failure, a receiver that is
gone), unstarted jobs are released (pending again, no attempt spent).

The worker's ledger writes commit asynchronously (``relaxed_durability``, see
``retention.db.connection``): each is re-driven idempotently if a crash undoes it.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from retention import metrics
from retention.db.connection import Connection, relaxed_durability
from retention.db.gate import Gate
from retention.progress import Progress
from retention.queue.classify import Classification, ClassificationTable, Outcome, classify
from retention.queue.http import HttpResult
from retention.queue.leased import Finish, LeasedQueue
from retention.queue.limiter import TokenBucket
from retention.stopping import disarm, stop_requested

log = logging.getLogger(__name__)


class Job(Protocol):
    @property
    def key(self) -> str: ...


J = TypeVar("J", bound=Job)


@dataclass(frozen=True)
class Attempt:
    """One job's outcome, waiting to be recorded with its batch."""

    job: Any
    finish: Finish
    started: float
    finished: float


@dataclass(frozen=True)
class Stop:
    """A kind's request to stop working: why, and an error to raise once the batch is recorded."""

    reason: str
    error: Exception | None = None


OUTAGE_MAX_PAUSE_SECONDS = 60.0
STOPPING = "stopping"  # WorkerStats.stopped after a SIGTERM: unstarted jobs were handed back
LIMITER = "limiter"  # the throttled_seconds reason of time spent waiting for tokens


class JobKind(Protocol[J]):
    """What a job kind brings to the shared loop."""

    queue: LeasedQueue
    table: ClassificationTable
    claim_batch: int
    call_timeout_seconds: float
    adjusted: dict[str, Finish]  # outcomes its completer recorded differently (reported so)

    def job(self, row: dict[str, Any]) -> J:
        """The job of a claimed row."""

    def screen(self, conn: Connection, jobs: list[J]) -> dict[str, Finish]:
        """Jobs that must not be sent (keyed by job key), with how to record them."""

    def send(self, job: J) -> HttpResult:
        """One attempt."""

    def refine(self, conn: Connection, c: Classification, stats: WorkerStats) -> Classification:
        """Add what the database knows to a classification (before ``decide``)."""

    def decide(self, job: J, c: Classification, now: dt.datetime) -> Finish:
        """The ledger change for an answer (pure: the clock is passed in)."""

    def after(self, conn: Connection, job: J, c: Classification) -> Stop | None:
        """Side effects of an answer; a ``Stop`` ends the worker after this batch."""

    def record(
        self,
        conn: Connection,
        owner: str,
        attempts: list[Attempt],
        scope: str | None,
        elapsed_ms: float,
    ) -> dict[str, int]:
        """Write a batch's outcomes; returns each recorded job key with the rows it deleted."""


@dataclass
class WorkerStats:
    """What one worker did, for logs, summaries and the task's XCom."""

    kind: str
    owner: str
    claimed: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    done: int = 0
    retried: int = 0
    snoozed: int = 0
    dead: int = 0
    released: int = 0
    stale: int = 0
    lost_leases: int = 0
    rows_deleted: int = 0
    out_of_time: bool = False
    stopped: str | None = None
    waited_for_tokens_seconds: float = 0.0
    token_takes: int = 0  # statements that took tokens (several at once when calls are fast)
    tokens_taken: int = 0
    tokens_dropped: int = 0  # taken ahead but not used within the hold
    outage_pauses: int = 0
    failure_classes: Counter[str] = field(default_factory=Counter)
    batches: list[tuple[int, float]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "claimed": self.claimed,
            "attempts_by_outcome": dict(self.outcomes),
            "statuses": dict(self.statuses),
            "done": self.done,
            "retried": self.retried,
            "snoozed": self.snoozed,
            "dead": self.dead,
            "released": self.released,
            "stale_leases": self.stale,
            "lost_leases": self.lost_leases,
            "rows_deleted": self.rows_deleted,
            "out_of_time": self.out_of_time,
            "stopped": self.stopped,
            "batches": len(self.batches),
            "waited_for_tokens_seconds": round(self.waited_for_tokens_seconds, 3),
            "token_takes": self.token_takes,
            "tokens_taken": self.tokens_taken,
            "tokens_dropped": self.tokens_dropped,
            "outage_pauses": self.outage_pauses,
            "failure_classes": dict(self.failure_classes),
        }


def stats_of(error: BaseException) -> WorkerStats | None:
    """The figures of the pass an error ended (what it deleted before it), when a
    :class:`Worker` raised it after recording its last batch."""
    stats = getattr(error, "worker_stats", None)
    return stats if isinstance(stats, WorkerStats) else None


class Worker:
    """Works due jobs of one kind until none are due, time runs out, or the kind stops it."""

    def __init__(
        self,
        conn: Connection,
        kind: JobKind[Any],
        *,
        budget_seconds: float,
        limiter: TokenBucket | None = None,
        gate: Gate | None = None,
        owner: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        progress: Progress | None = None,
    ) -> None:
        self.conn = conn
        self.kind = kind
        self.limiter = limiter
        self.gate = gate
        self.owner = owner or f"{kind.queue.policy}:{kind.queue.table.kind}:{uuid.uuid4().hex[:12]}"
        self.clock = clock
        self.now = now
        self.deadline = clock() + budget_seconds
        self.stats = WorkerStats(kind=kind.queue.table.kind, owner=self.owner)
        self.progress = progress or Progress(
            f"policy {kind.queue.policy}",
            None,
            unit=self.stats.kind,
            estimate=False,
            clock=clock,
            logger=log,
        )
        # Outage detection: a call without an answer is about its object only when the
        # calls around it answered; two in a row, or none answered at all, is an outage.
        self.tentative: tuple[int, Classification] | None = None
        self.answered = False  # any answer in this pass
        self.in_outage = False  # since the last answer

    def run(self, scope: str | None = None) -> WorkerStats:
        """One bounded pass: work every job that is due now (of one scope, if given)."""
        error: Exception | None = None
        with relaxed_durability(self.conn):
            while self.clock() < self.deadline:
                if stop_requested():  # SIGTERM: claim nothing more
                    disarm()
                    self.stats.stopped = STOPPING
                    break
                if self.gate is not None and not self.gate.wait(self.conn, until=self.deadline):
                    self.stats.stopped = "paused"  # still paused at the budget: all stays pending
                    break
                rows = self.kind.queue.claim(self.conn, self.owner, self.kind.claim_batch, scope)
                if not rows:
                    break
                self.stats.claimed += len(rows)
                stop = self._work([self.kind.job(row) for row in rows], scope)
                self.progress.update(self.stats.done, self._throttled(), self._outcome_words())
                if stop is not None:
                    self.stats.stopped = stop.reason
                    error = stop.error
                    break
                if self.stats.out_of_time:
                    break
        if self.limiter is not None:
            self.limiter.drop_held()  # the pass is over: what it took ahead is not used
            self.stats.waited_for_tokens_seconds = self.limiter.waited_seconds
            self.stats.token_takes = self.limiter.takes
            self.stats.tokens_taken = self.limiter.tokens_taken
            self.stats.tokens_dropped = self.limiter.tokens_dropped
            metrics.limiter_rate(
                self.kind.queue.policy, self.limiter.scope, self.limiter.effective_rate
            )
            metrics.throttled(self.kind.queue.policy, LIMITER, self.limiter.waited_seconds)
        self.progress.finish(
            extra=self._outcome_words(final=True), done=self.stats.done, throttled=self._throttled()
        )
        if error is not None:
            error.worker_stats = self.stats  # type: ignore[attr-defined]  # see stats_of
            raise error
        return self.stats

    def _throttled(self) -> dict[str, float]:
        """Time this pass waited, by reason: the gate's pauses and the API's rate limit."""
        waited = dict(self.gate.throttled()) if self.gate is not None else {}
        if self.limiter is not None and self.limiter.waited_seconds:
            waited["rate_limit"] = self.limiter.waited_seconds
        return waited

    def _outcome_words(self, *, final: bool = False) -> str:
        """``30 rows deleted, 3 retried, 1 dead``: what else the pass did, after the counts of
        its progress lines; the last line adds batches, answers, failures and how it ended."""
        stats = self.stats
        counts = {
            "retried": stats.retried,
            "snoozed": stats.snoozed,
            "dead": stats.dead,
            "released": stats.released,
            "stale": stats.stale,
            "lost leases": stats.lost_leases,
            "outage pauses": stats.outage_pauses,
        }
        words = [f"{n:,} {what}" for what, n in counts.items() if n]
        if stats.rows_deleted:
            words.insert(0, f"{stats.rows_deleted:,} rows deleted")
        if final:
            words.append(f"{len(stats.batches)} batches")
            if stats.statuses:
                words.append("answers " + ", ".join(f"{k} ×{n}" for k, n in stats.statuses.items()))
            if stats.failure_classes:
                words.append(
                    "failures " + ", ".join(f"{k} {n}" for k, n in stats.failure_classes.items())
                )
            if stats.out_of_time:
                words.append("out of time")
            if stats.stopped:
                words.append(f"stopped: {stats.stopped}")
            words.append(f"worker {self.owner}")
        return ", ".join(words)

    def _work(self, batch: list[Any], scope: str | None) -> Stop | None:
        """Send each claimed job; record the batch's outcomes together, whatever happens.

        If sending stops early (an error, a stop, the budget), jobs that were
        never sent are handed back at once instead of waiting out their lease.
        """
        attempts: list[Attempt] = []
        held = {job.key for job in batch}
        sent: set[str] = set()  # a job whose call began is never "unstarted"
        began = time.perf_counter()
        try:
            return self._send_each(batch, attempts, held, sent)
        finally:
            self._settle(attempts)
            self._record(attempts, scope, (time.perf_counter() - began) * 1000)
            done = sent | {attempt.job.key for attempt in attempts}
            self._give_back([job for job in batch if job.key in held - done])

    def _renew_every(self) -> float:
        """Renew often enough that a call that starts on a lease never outlives it."""
        lease = self.kind.queue.lease_seconds
        return min(lease / 3, max(0.0, lease - self.kind.call_timeout_seconds) / 2)

    def _send_each(
        self, batch: list[Any], attempts: list[Attempt], held: set[str], sent: set[str]
    ) -> Stop | None:
        renewed = [self.clock()]

        def keep_leases() -> None:
            if self.clock() - renewed[0] >= self._renew_every():
                still = self.kind.queue.renew(self.conn, self.owner, sorted(held))
                self.stats.lost_leases += len(held - still)
                held.intersection_update(still)
                renewed[0] = self.clock()

        skip = self.kind.screen(self.conn, batch)
        to_send = sum(1 for job in batch if job.key not in skip)
        for job in batch:
            if job.key not in held:  # lost its lease while we waited: someone else works it now
                if job.key not in skip:
                    to_send -= 1
                continue
            if job.key in skip:
                moment = time.time()
                attempts.append(Attempt(job, skip[job.key], moment, moment))
                continue
            upcoming, to_send = to_send, to_send - 1
            keep_leases()  # before the token: nothing slow between a token and its call
            if job.key not in held:
                continue
            if stop_requested() or not self._wait_for_token(keep_leases, upcoming):
                return self._stopping_or_out_of_time()  # unstarted jobs: handed back by _work
            if job.key not in held:  # renewed while waiting for the token, and lost
                continue
            sent.add(job.key)
            result = self.kind.send(job)
            c = classify(result.status, result.headers, result.error, self.now(), self.kind.table)
            c = self.kind.refine(self.conn, c, self.stats)
            self.stats.outcomes[c.outcome.value] += 1
            metrics.remote_request(self.kind.queue.policy, self.stats.kind, c.outcome.value)
            self.stats.statuses[str(result.status or result.error)] += 1
            if c.outcome is Outcome.RATE_LIMITED and self.limiter is not None:
                rate = self.limiter.throttle(c.retry_after_seconds or 1.0)
                metrics.limiter_rate(self.kind.queue.policy, self.limiter.scope, rate)
            if result.status is None and self._is_outage(attempts, c):
                attempts.append(Attempt(job, self._outage(c), result.started, result.finished))
                if self.limiter is None:
                    return Stop("unreachable")
                continue
            if result.status is None:  # maybe this object only: decided if the next one answers
                self.tentative = (len(attempts), c)
            else:
                self.tentative = None
                self.answered = True
                self.in_outage = False
            attempts.append(
                Attempt(job, self.kind.decide(job, c, self.now()), result.started, result.finished)
            )
            stop = self.kind.after(self.conn, job, c)
            if stop is not None:
                return stop
        return None

    def _stopping_or_out_of_time(self) -> Stop | None:
        """Why no call is made now: a SIGTERM (stop, nothing to cancel any more), or the
        pass's time budget (the pass ends; what is left is worked next time)."""
        if stop_requested():
            disarm()
            return Stop(STOPPING)
        self.stats.out_of_time = True
        return None

    def _is_outage(self, attempts: list[Attempt], c: Classification) -> bool:
        """No answer: an outage if the call before got none either (that one becomes part of
        the outage, spending no attempt), or if nothing has answered in this pass."""
        if self.tentative is not None:
            index, earlier = self.tentative
            self.tentative = None
            if index < len(attempts):
                before = attempts[index]
                attempts[index] = Attempt(
                    before.job, self._outage(earlier), before.started, before.finished
                )
            self.in_outage = True
            return True
        return self.in_outage

    def _settle(self, attempts: list[Attempt]) -> None:
        """At the end of a batch: a lone unanswered call in a pass where nothing answered is
        an outage too (a single-object failure needs other calls to answer around it)."""
        if self.tentative is not None and not self.answered:
            index, earlier = self.tentative
            if index < len(attempts):
                before = attempts[index]
                attempts[index] = Attempt(
                    before.job, self._outage(earlier), before.started, before.finished
                )
        self.tentative = None  # indexes are per batch; a lone failure among answers stays its own

    def _outage(self, c: Classification) -> Finish:
        """No answer, and none of the recent calls got one either: an outage of the scope.

        The job is snoozed without spending an attempt, and the whole scope
        pauses with a growing backoff (as on a 429, without lowering the rate),
        logged once per pause; the pass goes on waiting within its budget, then
        hands back what is left.
        """
        self.stats.outage_pauses += 1
        pause = min(OUTAGE_MAX_PAUSE_SECONDS, 2.0 ** min(self.stats.outage_pauses - 1, 10))
        log.warning(
            "%s: no answer from the API (%s), and the call before got none either; "
            "pausing the scope for %.0f s (outage pause %d); no attempt is spent",
            self.progress.label,
            c.reason,
            pause,
            self.stats.outage_pauses,
        )
        if self.limiter is not None:
            self.limiter.pause(pause)
        return Finish(
            "pending",
            "outage",
            None,
            "api_unreachable",
            c.reason,
            self.now() + dt.timedelta(seconds=pause),
            attempt_spent=0,
        )

    def _wait_for_token(self, keep_leases: Callable[[], None], upcoming: int) -> bool:
        """A token for the next call; ``upcoming`` calls (this one included) are lined up."""
        if self.limiter is None:
            return self.clock() < self.deadline
        return self.limiter.acquire(
            self.deadline,
            on_wait=keep_leases,
            max_pause=self._renew_every() / 2,
            upcoming=upcoming,
        )

    def _record(self, attempts: list[Attempt], scope: str | None, elapsed_ms: float) -> None:
        if not attempts:
            return
        recorded = self.kind.record(self.conn, self.owner, attempts, scope, elapsed_ms)
        deleted = sum(recorded.values())
        self.stats.rows_deleted += deleted
        self.stats.batches.append((deleted, elapsed_ms))
        metrics.queue_batch(self.kind.queue.policy, self.stats.kind, deleted, elapsed_ms)
        for attempt in attempts:
            finish = self.kind.adjusted.pop(attempt.job.key, attempt.finish)
            if attempt.job.key in recorded and finish.failure_class and finish.state != "done":
                self.stats.failure_classes[finish.failure_class] += 1
            if attempt.job.key not in recorded:
                self.stats.stale += 1
            elif finish.state == "dead":
                self.stats.dead += 1
                log.warning(
                    "%s: %s dead: %s (key %s)",
                    self.progress.label,
                    self.stats.kind.removesuffix("s"),
                    finish.reason,
                    attempt.job.key,
                )
            elif finish.state == "pending":
                if finish.attempt_spent:
                    self.stats.retried += 1
                else:
                    self.stats.snoozed += 1
            else:
                self.stats.done += 1

    def _give_back(self, jobs: list[Any]) -> None:
        if not jobs or self.conn.closed or self.conn.broken:
            return
        released = self.kind.queue.release(self.conn, self.owner, [j.key for j in jobs])
        self.stats.released += len(released)
