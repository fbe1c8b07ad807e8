"""The one worker loop of every job kind: claim, wait for a token, attempt, decide, record.

A worker claims a few due jobs (a short transaction), then for each one waits
for a token of the shared bucket (kinds with a limiter), asks the kind to
``attempt`` it (the kind sends it by its own transport and says what the answer
means, a :class:`Classification`) and asks the kind's pure ``decide`` what the
ledger should say. The worker knows no transport: no HTTP status, no SQL
delete, no file; what an answer's rate-limit headers said of the API's quota
reaches it as the classification's ``quota``, which paces the shared bucket
(``TokenBucket.follow``). Outcomes of a claimed batch are recorded together by the
kind's ``record`` (a batch completer, as in River), which returns the
:class:`Recorded` batch: the final :class:`Finish` of each key and the
transactions that wrote them. A worker that dies before that leaves its jobs
``in_flight`` until their leases expire, and the next claim re-drives them with
the same key.

Leases are renewed while the batch is worked; a job whose lease was lost
(reclaimed after it expired) is not worked any further. When the time budget
runs out, or the kind says stop (a credential failure, a receiver that is
gone), unstarted jobs are released (pending again, no attempt spent).

The worker's ledger writes commit asynchronously (``relaxed_durability``, see
``retention.db.connection``): each is re-driven idempotently if a crash undoes it.

Each pass measures where its time went (``WorkerStats.time``: calls, waits for tokens,
the gate's pauses, claims that found nothing, and the pool's stats when it is given a
:class:`~retention.queue.bound.PoolWatch`), for the verdict on what bounds the drain
(``retention.queue.bound``). It also tells the metrics what operators watch while it
runs: jobs claimed, admitted and completed after each claim and batch, and the queue's
oldest ages and dead letters after its first batch, every
:data:`QUEUE_FIGURES_SECONDS` and at its end.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeVar

from retention import metrics
from retention.db.connection import Connection, relaxed_durability
from retention.db.gate import Gate
from retention.progress import Progress
from retention.queue.bound import PassTime, PoolWatch
from retention.queue.classify import Classification, Outcome
from retention.queue.leased import Finish, LeasedQueue, State
from retention.queue.limiter import TokenBucket
from retention.queue.outage import OutageDetector, outage_finish
from retention.stopping import disarm, stop_requested
from retention.summary import BoundEvidence

log = logging.getLogger(__name__)


class Job(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def described(self) -> str:
        """How a log line names the job: what it is about (an object and its row), and its
        key, so that an operator can find both without looking the key up."""


J = TypeVar("J", bound=Job)
C = TypeVar("C", bound=Classification)


@dataclass(frozen=True)
class Attempt:
    """One job's outcome, waiting to be recorded with its batch."""

    job: Any
    finish: Finish
    started: float
    finished: float


@dataclass(frozen=True, kw_only=True)
class Recorded:
    """What a kind's ``record`` wrote for one batch.

    ``finishes`` holds each key that was recorded with the :class:`Finish` it
    was recorded as, which a kind's fallback may have changed (a confirmed
    deletion whose local delete must be retried); a key that is missing lost its
    lease. ``transactions`` holds each transaction that recorded outcomes, as
    (rows it deleted, its milliseconds): the window's batch figures, the same
    numbers the window ledger counted in those transactions.
    """

    finishes: dict[str, Finish]
    rows_deleted: dict[str, int] = field(default_factory=dict)
    transactions: list[tuple[int, float]] = field(default_factory=list)
    # Rows deleted by table (the policy's and its listed children's), for the metric.
    rows_by_table: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Stop:
    """A kind's request to stop working: why, and an error to raise once the batch is recorded."""

    reason: str
    error: Exception | None = None


STOPPING = "stopping"  # WorkerStats.stopped after a SIGTERM: unstarted jobs were handed back
LIMITER = "limiter"  # the throttled_seconds reason of time spent waiting for tokens
RATE_LIMIT = "rate_limit"  # the same time, as progress lines name it
QUEUE_FIGURES_SECONDS = 30.0  # a long pass reads its queue's ages and dead letters this often
NO_POOL = "no pool was watched in this pass"  # PassTime.pool_unread of a pass without one


class JobKind(Protocol[J, C]):
    """What a job kind brings to the shared loop: its jobs, its transport, its decisions and
    its completer. ``C`` is the kind's classification (a subclass may carry what only this
    kind knows, such as the operations' 404 breaker)."""

    queue: LeasedQueue
    claim_batch: int
    call_timeout_seconds: float

    def job(self, row: dict[str, Any]) -> J:
        """The job of a claimed row."""

    def screen(self, conn: Connection, jobs: list[J]) -> dict[str, Finish]:
        """Jobs that must not be attempted (keyed by job key), with how to record them."""

    def attempt(self, conn: Connection, job: J) -> C:
        """One attempt by the kind's own transport, and what its answer means (``conn`` is
        for what the ledger knows about answers; the attempt itself commits nothing)."""

    def decide(self, job: J, c: C, now: dt.datetime) -> Finish:
        """The ledger change for an answer (pure: the clock is passed in)."""

    def after(self, conn: Connection, job: J, c: C) -> Stop | None:
        """Side effects of an answer; a ``Stop`` ends the worker after this batch."""

    def record(
        self, conn: Connection, owner: str, attempts: list[Attempt], scope: str | None
    ) -> Recorded:
        """Write a batch's outcomes; returns what was recorded, and as what."""


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
    held: int = 0  # kept by a legal hold (ours, or the remote side's): waits in 'held'
    released: int = 0
    stale: int = 0
    lost_leases: int = 0
    rows_deleted: int = 0
    # Rows deleted by table (the policy's table and each listed child), for the summary's
    # rows_deleted_by_table when this is a drain pass (a window's pass tallies its own).
    rows_by_table: Counter[str] = field(default_factory=Counter)
    out_of_time: bool = False
    stopped: str | None = None
    waited_for_tokens_seconds: float = 0.0
    token_takes: int = 0  # statements that took tokens (several at once when calls are fast)
    tokens_taken: int = 0
    tokens_dropped: int = 0  # taken ahead but not used within the hold
    outage_pauses: int = 0
    failure_classes: Counter[str] = field(default_factory=Counter)
    # Each recorded batch: rows deleted, and ms from its claim to its record (calls included).
    batches: list[tuple[int, float]] = field(default_factory=list)
    # Each transaction that recorded outcomes: rows deleted, and its own ms (see Recorded).
    transactions: list[tuple[int, float]] = field(default_factory=list)
    # Where the pass's time went, and the verdict on it (set by a kind with a rate to keep).
    time: PassTime = field(default_factory=PassTime)
    bound: BoundEvidence | None = None

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
            "held": self.held,
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
            **({"rows_by_table": dict(self.rows_by_table)} if self.rows_by_table else {}),
            "time": self.time.to_json(),
            **({"bound": asdict(self.bound)} if self.bound is not None else {}),
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
        kind: JobKind[Any, Any],
        *,
        budget_seconds: float,
        limiter: TokenBucket | None = None,
        gate: Gate | None = None,
        owner: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        progress: Progress | None = None,
        pool: PoolWatch | None = None,
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
        self.outages = OutageDetector()
        self.pool = pool
        # What the pass measures as it goes (see _measure) and has told the metrics so far.
        self._calling = 0.0
        self._calls = 0
        self._idle = 0.0
        self._told = Counter[str]()
        self._figures_at: float | None = None

    def run(self, scope: str | None = None) -> WorkerStats:
        """One bounded pass: work every job that is due now (of one scope, if given)."""
        began, paused_before = self.clock(), self._gate_seconds()
        waited_before = self.limiter.waited_seconds if self.limiter is not None else 0.0
        self._sample_pool()
        try:
            error = self._claim_and_work(scope)
        finally:  # a pass that failed measured its time too
            self._measure(began, paused_before, waited_before)
        self._tell_batch(final=True)
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

    def _claim_and_work(self, scope: str | None) -> Exception | None:
        """Claim and work batches until none is due, time runs out or the kind stops the
        pass; returns the error a kind's stop asked to raise once all is recorded."""
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
                claiming = self.clock()
                rows = self.kind.queue.claim(self.conn, self.owner, self.kind.claim_batch, scope)
                self._tell_claims(len(rows))
                if not rows:  # nothing it could call: the pass ends
                    self._idle += self.clock() - claiming
                    break
                self.stats.claimed += len(rows)
                stop = self._work([self.kind.job(row) for row in rows], scope)
                self.progress.update(self.stats.done, self._throttled(), self._outcome_words())
                self._sample_pool()
                self._tell_batch(final=False)
                if stop is not None:
                    self.stats.stopped = stop.reason
                    error = stop.error
                    break
                if self.stats.out_of_time:
                    break
        return error

    def _gate_seconds(self) -> float:
        """Seconds the gate has paused or paced so far (its pauses and pacing: the database)."""
        return sum(self.gate.throttled().values()) if self.gate is not None else 0.0

    def _sample_pool(self) -> None:
        """Read the pool's stats if a read is due (the watch decides how often)."""
        if self.pool is not None:
            self.pool.sample(self.clock())

    def _measure(self, began: float, paused_before: float, waited_before: float) -> None:
        """Where the pass's time went (``WorkerStats.time``), for the verdict on its bound."""
        ended = self.clock()
        seconds = max(0.0, ended - began)
        limiter = self.limiter
        pool = self.pool.close(ended) if self.pool is not None else {"pool_unread": NO_POOL}
        self.stats.time = PassTime(
            seconds=seconds,
            calling=self._calling,
            calls=self._calls,
            limiter=(limiter.waited_seconds - waited_before) if limiter is not None else 0.0,
            database=max(0.0, self._gate_seconds() - paused_before),
            idle=self._idle,
            rate_seconds=limiter.effective_rate * seconds if limiter is not None else 0.0,
            **pool,
        )

    def _tell_claims(self, claimed: int) -> None:
        """A claim's jobs, and those of them whose lease had expired, to the metrics."""
        reclaimed = self.kind.queue.reclaimed - self._told["reclaimed"]
        self._told["reclaimed"] += reclaimed
        metrics.queue_counts(
            self.kind.queue.policy, self.stats.kind, claimed=claimed, reclaimed=reclaimed
        )

    def _tell_batch(self, *, final: bool) -> None:
        """Calls admitted and jobs completed since the last batch; the queue's ages and dead
        letters after the first batch, every QUEUE_FIGURES_SECONDS and at the end."""
        admitted = self.limiter.tokens_taken if self.limiter is not None else self._calls
        counts = {"admitted": admitted, "completed": self.stats.done}
        new = {what: n - self._told[what] for what, n in counts.items()}
        self._told.update(new)
        policy, kind = self.kind.queue.policy, self.stats.kind
        metrics.queue_counts(policy, kind, **new)
        now = self.clock()
        recent = self._figures_at is not None and now - self._figures_at < QUEUE_FIGURES_SECONDS
        if recent and not final:
            return
        self._figures_at = now
        if self.conn.closed or self.conn.broken:
            return
        figures = self.kind.queue.figures(self.conn)
        if figures is not None:
            metrics.queue_figures(
                policy,
                kind,
                oldest_pending_seconds=figures.oldest_pending_seconds,
                oldest_leased_seconds=figures.oldest_leased_seconds,
                dead=figures.dead,
            )
        if final:
            metrics.call_ms(policy, kind, self._calls, self._calling)

    def _throttled(self) -> dict[str, float]:
        """Time this pass waited, by reason: the gate's pauses and the API's rate limit."""
        waited = dict(self.gate.throttled()) if self.gate is not None else {}
        if self.limiter is not None and self.limiter.waited_seconds:
            waited[RATE_LIMIT] = self.limiter.waited_seconds
        return waited

    def _outcome_words(self, *, final: bool = False) -> str:
        """``30 rows deleted, 3 retried, 1 dead``: what else the pass did, after the counts of
        its progress lines; the last line adds batches, answers, failures and how it ended."""
        stats = self.stats
        counts = {
            "retried": stats.retried,
            "snoozed": stats.snoozed,
            "dead": stats.dead,
            "held": stats.held,
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
        """Attempt each claimed job; record the batch's outcomes together, whatever happens.

        If attempting stops early (an error, a stop, the budget), jobs that were
        never attempted are handed back at once instead of waiting out their lease.
        """
        attempts: list[Attempt] = []
        held = {job.key for job in batch}
        sent: set[str] = set()  # a job whose call began is never "unstarted"
        began = time.perf_counter()
        try:
            return self._attempt_each(batch, attempts, held, sent)
        finally:
            self._settle(attempts)
            self._record(attempts, scope, (time.perf_counter() - began) * 1000)
            done = sent | {attempt.job.key for attempt in attempts}
            self._give_back([job for job in batch if job.key in held - done])

    def _renew_every(self) -> float:
        """Renew often enough that a call that starts on a lease never outlives it."""
        lease = self.kind.queue.lease_seconds
        return min(lease / 3, max(0.0, lease - self.kind.call_timeout_seconds) / 2)

    def _attempt_each(
        self, batch: list[Any], attempts: list[Attempt], held: set[str], sent: set[str]
    ) -> Stop | None:
        renewed = [self.clock()]

        def keep_leases() -> None:
            self._sample_pool()  # before the token: a slow read never delays a granted call
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
            started, calling = time.time(), self.clock()
            c = self.kind.attempt(self.conn, job)
            finished = time.time()
            self._calling += self.clock() - calling
            self._calls += 1
            self.stats.outcomes[c.outcome.value] += 1
            metrics.remote_request(self.kind.queue.policy, self.stats.kind, c.outcome.value)
            self.stats.statuses[c.answer] += 1
            if c.outcome is Outcome.RATE_LIMITED and self.limiter is not None:
                rate = self.limiter.throttle(c.retry_after_seconds or 1.0)
                metrics.limiter_rate(self.kind.queue.policy, self.limiter.scope, rate)
            if self.limiter is not None and c.outcome is not Outcome.RATE_LIMITED:
                self.limiter.follow(c.quota)  # the API's own word on its quota sets the pace
            outage, earlier = self.outages.observe(len(attempts), c)
            if earlier is not None:
                self._into_outage(attempts, earlier)
            if outage:
                attempts.append(Attempt(job, self._outage(c), started, finished))
                if self.limiter is None:
                    return Stop("unreachable")
                continue
            attempts.append(Attempt(job, self.kind.decide(job, c, self.now()), started, finished))
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

    def _into_outage(self, attempts: list[Attempt], earlier: tuple[int, Classification]) -> None:
        """An earlier unanswered call of this batch turned out to be part of an outage: it is
        recorded as one (no attempt spent) instead of as its own failure."""
        index, c = earlier
        if index < len(attempts):
            before = attempts[index]
            attempts[index] = Attempt(before.job, self._outage(c), before.started, before.finished)

    def _settle(self, attempts: list[Attempt]) -> None:
        """At the end of a batch, a lone unanswered call may still be an outage (see
        :meth:`OutageDetector.settle`)."""
        earlier = self.outages.settle()
        if earlier is not None:
            self._into_outage(attempts, earlier)

    def _outage(self, c: Classification) -> Finish:
        """No answer, and none of the recent calls got one either: an outage of the scope.

        The job is snoozed without spending an attempt, and the whole scope
        pauses with a growing backoff (as on a 429, without lowering the rate),
        logged once per pause; the pass goes on waiting within its budget, then
        hands back what is left.
        """
        pause = self.outages.next_pause()
        self.stats.outage_pauses = self.outages.pauses
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
        return outage_finish(c, self.now(), pause)

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
        recorded = self.kind.record(self.conn, self.owner, attempts, scope)
        deleted = sum(recorded.rows_deleted.values())
        self.stats.rows_deleted += deleted
        self.stats.rows_by_table.update(
            {table: rows for table, rows in recorded.rows_by_table.items() if rows}
        )
        self.stats.batches.append((deleted, elapsed_ms))
        self.stats.transactions.extend(recorded.transactions)
        metrics.queue_batch(
            self.kind.queue.policy, self.stats.kind, recorded.rows_by_table, elapsed_ms
        )
        for attempt in attempts:
            finish = recorded.finishes.get(attempt.job.key)
            if finish is None:  # lost its lease: someone else records it
                self.stats.stale += 1
                continue
            if finish.state == State.HELD:  # not a failure: kept on purpose
                self.stats.held += 1
                continue
            if finish.failure_class and finish.state != State.DONE:
                self.stats.failure_classes[finish.failure_class] += 1
            if finish.state == State.DEAD:
                self.stats.dead += 1
                log.warning(
                    "%s: %s dead: %s (%s)",
                    self.progress.label,
                    self.stats.kind.removesuffix("s"),
                    finish.reason,
                    attempt.job.described,
                )
            elif finish.state == State.PENDING:
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
