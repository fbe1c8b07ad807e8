"""Drive remote deletions: claim, take a token, call, classify, record.

One worker per task.  It claims a few due operations (a short transaction),
then for each one waits for a token of the shared bucket, calls the API with
the operation key as idempotency key, classifies the answer and records it
(one transaction, guarded by its lease).  When its time budget runs out it
hands back what it has not started and stops cleanly; what is left stays
pending for the next run's drain step.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from retention.classify import (
    Classification,
    Outcome,
    backoff_seconds,
    classify,
    retry_after_with_jitter,
)
from retention.db import Connection
from retention.http_client import HttpResult
from retention.limiter import TokenBucket
from retention.operations import (
    AttemptRecord,
    Claimed,
    Finish,
    claim,
    current_versions,
    finish_many,
    next_due,
    release,
    renew,
)
from retention.policy import Policy, RemoteSpec
from retention.sqlfiles import query

log = logging.getLogger(__name__)


class CredentialFailure(RuntimeError):
    """A streak of 401/403 answers: the credentials are wrong, not the objects."""


class Sender(Protocol):
    def send(self, operation_key: str, object_id: str, tenant: str | None) -> HttpResult: ...


@dataclass
class WorkerStats:
    """What one worker did, for logs and the task's XCom."""

    outcomes: Counter[str] = field(default_factory=Counter)
    claimed: int = 0
    released: int = 0
    stale: int = 0
    dead: int = 0
    rows_deleted: int = 0
    out_of_time: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "attempts_by_outcome": dict(self.outcomes),
            "claimed": self.claimed,
            "released": self.released,
            "stale_leases": self.stale,
            "dead": self.dead,
            "rows_deleted": self.rows_deleted,
            "out_of_time": self.out_of_time,
        }


def decide(
    op: Claimed,
    remote: RemoteSpec,
    c: Classification,
    rng: random.Random,
    *,
    others_succeed: bool = False,
) -> Finish:
    """Turn a classification into the ledger change (pure).

    401/403 spend no attempt (a credential outage must not exhaust healthy
    objects); an object refused 3 times in a row goes dead only while other
    calls of the same worker succeed, which shows the credentials are fine.
    """
    now = dt.datetime.now(dt.UTC)
    attempts = op.attempt_count + 1
    if c.outcome is Outcome.CONFIRMED:
        return Finish("done", c.outcome, c.status, reason=c.reason)
    if c.outcome is Outcome.RATE_LIMITED:
        wait = retry_after_with_jitter(c.retry_after_seconds or 1.0, rng)
        return Finish(
            "pending",
            c.outcome,
            c.status,
            c.failure_class,
            c.reason,
            now + dt.timedelta(seconds=wait),
            attempt_spent=0,
            rate_limited=1,
        )
    if c.outcome is Outcome.REJECTED:
        return Finish("dead", c.outcome, c.status, c.failure_class, c.reason)
    if attempts >= remote.max_attempts and c.outcome is not Outcome.AUTH:
        return Finish(
            "dead",
            c.outcome,
            c.status,
            "max_attempts",
            f"{attempts} attempts; last: {c.reason}",
            auth_failure=c.outcome is Outcome.AUTH,
        )
    if c.outcome is Outcome.AUTH and others_succeed and op.auth_failure_count + 1 >= 3:
        return Finish(
            "dead",
            c.outcome,
            c.status,
            c.failure_class,
            f"{c.reason} on 3 attempts in a row while other calls succeed",
            auth_failure=True,
        )
    auth = c.outcome is Outcome.AUTH
    step = op.auth_failure_count + 1 if auth else attempts
    wait = backoff_seconds(step, remote.backoff_base_seconds, remote.backoff_max_seconds, rng)
    return Finish(
        "pending",
        c.outcome,
        c.status,
        c.failure_class,
        c.reason,
        now + dt.timedelta(seconds=wait),
        attempt_spent=0 if auth else 1,
        auth_failure=auth,
    )


class RemoteWorker:
    """Processes due operations of one policy until none are left or time runs out."""

    def __init__(
        self,
        conn: Connection,
        policy: Policy,
        sender: Sender,
        *,
        budget_seconds: float | None = None,
        owner: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        assert policy.remote is not None, "RemoteWorker needs a policy with a remote section"
        self.conn = conn
        self.policy = policy
        self.remote: RemoteSpec = policy.remote
        self.sender = sender
        self.owner = owner or f"{policy.name}:{uuid.uuid4().hex[:12]}"
        self.deadline = time.monotonic() + (budget_seconds or self.remote.task_budget_seconds)
        self.sleep = sleep
        self.rng = rng or random.Random()
        # Every ledger write of a worker is safe to lose in a database crash: a lost
        # claim or token is taken again, a lost outcome is re-driven with the same
        # idempotency key. So its commits need not wait for the WAL flush; the next
        # synchronous commit on the server (reconcile's) makes them all durable.
        conn.execute("SET synchronous_commit = off")
        self.bucket = TokenBucket.for_remote(conn, self.remote)
        self.bucket.sleep = sleep
        self.stats = WorkerStats()
        self.auth_streak = 0

    def run(self, window_key: str | None = None) -> WorkerStats:
        """Work one window's operations (waiting out short backoffs), or drain all due ones."""
        while time.monotonic() < self.deadline:
            batch = claim(self.conn, self.policy, self.owner, self.remote.claim_batch, window_key)
            if batch:
                self.stats.claimed += len(batch)
                self._work(batch)
                if self.stats.out_of_time:
                    break
                continue
            if window_key is None:
                break
            due, remaining = next_due(self.conn, window_key)
            if not remaining or due is None:
                break
            wait = max(0.05, (due - dt.datetime.now(dt.UTC)).total_seconds())
            if time.monotonic() + wait > self.deadline:
                self.stats.out_of_time = True
                break
            self.sleep(min(wait, 5.0))
        log.info(
            "policy %s worker %s: %s (effective rate %.2f/s, waited %.1fs for tokens)",
            self.policy.name,
            self.owner,
            self.stats.as_dict(),
            self.bucket.effective_rate,
            self.bucket.waited_seconds,
        )
        return self.stats

    def _work(self, batch: list[Claimed]) -> None:
        """Call the API for each claimed operation; record the outcomes together.

        Outcomes are recorded in one statement per batch (a batch completer): a
        crash before that loses at most one batch of records, which are re-driven
        with the same idempotency keys once their leases expire.
        """
        pending: list[AttemptRecord] = []
        try:
            self._call_each(batch, pending)
        finally:
            self._record(pending)

    def _call_each(self, batch: list[Claimed], pending: list[AttemptRecord]) -> None:
        keys = [o.operation_key for o in batch]  # called-but-unrecorded ones are ours too
        renewed = [time.monotonic()]

        def keep_leases() -> None:
            if time.monotonic() - renewed[0] > self.remote.lease / 3:
                renew(self.conn, self.policy, self.owner, keys)
                renewed[0] = time.monotonic()

        versions = current_versions(self.conn, self.policy, [o.row_key for o in batch])
        for index, op in enumerate(batch):
            skip = self._not_to_call(op, versions)
            if skip is not None:
                now = time.time()
                pending.append(AttemptRecord(op, skip, now, now))
                continue
            if not self.bucket.acquire(self.deadline, on_wait=keep_leases):
                self._give_back(batch[index:])
                self.stats.out_of_time = True
                return
            keep_leases()
            result = self.sender.send(op.operation_key, op.object_id, op.tenant)
            c = classify(result.status, result.headers, result.error)
            self.stats.outcomes[c.outcome.value] += 1
            if c.outcome is Outcome.RATE_LIMITED:
                self.bucket.throttle(c.retry_after_seconds or 1.0)
            change = decide(op, self.remote, c, self.rng, others_succeed=self._others_succeed(c))
            pending.append(AttemptRecord(op, change, result.started, result.finished))
            self._watch_credentials(c, batch[index + 1 :])

    def _others_succeed(self, c: Classification) -> bool:
        """For 401/403: did this worker, or the policy within the hour, get confirmations?"""
        if c.outcome is not Outcome.AUTH:
            return False
        if self.stats.outcomes["confirmed"]:
            return True
        row = self.conn.execute(query("recent_confirmations"), {"policy": self.policy.name})
        return bool(row.fetchone()["recent"])  # type: ignore[index]

    def _not_to_call(self, op: Claimed, versions: dict[int, str]) -> Finish | None:
        """Refuse calls that could delete the wrong thing (no API call is made)."""
        current = versions.get(op.row_key)
        if current is not None and current != op.version:
            return Finish(
                "dead",
                "not_called",
                None,
                "superseded",
                f"row {op.row_key} is now version {current}, not {op.version} (restored?); "
                "the object was not deleted",
                attempt_spent=0,
            )
        if "{tenant_id}" in self.remote.endpoint and not op.tenant:
            return Finish(
                "dead",
                "not_called",
                None,
                "missing_tenant",
                "the endpoint needs {tenant_id} but the row has no tenant",
                attempt_spent=0,
            )
        return None

    def _record(self, outcomes: list[AttemptRecord]) -> None:
        recorded = self.record(outcomes)
        self.stats.rows_deleted += sum(recorded.values())
        for outcome in outcomes:
            if outcome.op.operation_key not in recorded:
                self.stats.stale += 1
            elif outcome.change.state == "dead":
                self.stats.dead += 1
                log.warning(
                    "operation %s (object %s) is dead: %s",
                    outcome.op.operation_key,
                    outcome.op.object_id,
                    outcome.change.reason,
                )

    def record(self, outcomes: list[AttemptRecord]) -> dict[str, int]:
        """Write outcomes to the ledger; returns the keys this worker still held (rows deleted)."""
        return finish_many(self.conn, self.policy, self.owner, outcomes)

    def _watch_credentials(self, c: Classification, rest: list[Claimed]) -> None:
        if c.outcome is not Outcome.AUTH:
            self.auth_streak = 0
            return
        self.auth_streak += 1
        if self.auth_streak >= self.remote.auth_failure_limit:
            self._give_back(rest)
            raise CredentialFailure(
                f"policy {self.policy.name!r}: {self.auth_streak} calls in a row to "
                f"connection {self.remote.http_conn_id!r} answered HTTP {c.status}; the "
                "credentials are wrong or revoked. Stopping instead of dead-lettering every "
                "object; the operations stay pending. Fix the connection and rerun."
            )

    def _give_back(self, ops: list[Claimed]) -> None:
        release(self.conn, self.owner, [o.operation_key for o in ops])
        self.stats.released += len(ops)
