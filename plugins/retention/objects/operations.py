"""Remote deletions as a job kind of the leased queue: ``retention.operations``.

One operation per intended deletion, keyed by
``sha256(policy | revision | table | row key | version)``. A window enqueues
one per eligible row; the shared worker claims, calls, classifies and asks
:func:`decide_operation`; the outcomes of a batch are recorded by the atomic
finish (``ops_finish.sql``): one statement marks operations done, deletes
their local rows (of the version they were made for), writes the attempts and
inserts each done operation's ``retention.deleted`` event into the outbox.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from dataclasses import dataclass, replace
from functools import cache
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query
from retention.policy.model import Policy, RemoteSpec
from retention.queue.classify import OPERATION_ANSWERS, Classification, Outcome
from retention.queue.decisions import dead, retried, snoozed
from retention.queue.http import HttpResult, HttpSender
from retention.queue.leased import OPERATIONS, Finish, LeasedQueue
from retention.queue.worker import Attempt, Stop, WorkerStats
from retention.rows.target import TargetTable
from retention.rows.windows import Window

log = logging.getLogger(__name__)

AUTH_REFUSALS_BEFORE_DEAD = 3


class CredentialFailure(RuntimeError):
    """A streak of 401/403 answers: the credentials are wrong, not the objects."""


def operation_key(policy: str, revision: int, table: str, row_key: int, version: str) -> str:
    """The same key the ledger's SQL derives (``TargetTable.operation_key_expr``)."""
    text = "|".join((policy, str(revision), table, str(row_key), version))
    return hashlib.sha256(text.encode()).hexdigest()


def endpoint_for(remote: RemoteSpec, object_id: str, tenant: str | None) -> str:
    """The policy's endpoint with ``{object_id}`` and ``{tenant_id}`` URL-encoded."""
    return remote.endpoint.format(
        object_id=quote(str(object_id), safe=""), tenant_id=quote(str(tenant or ""), safe="")
    )


@dataclass(frozen=True)
class Operation:
    """An operation this worker holds a lease on."""

    operation_key: str
    row_key: int
    object_id: str
    tenant: str | None
    version: str
    window_key: str | None
    attempt_count: int
    claim_count: int
    auth_failure_count: int

    @property
    def key(self) -> str:
        return self.operation_key

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Operation:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


def decide_operation(
    op: Operation, c: Classification, now: dt.datetime, remote: RemoteSpec
) -> Finish:
    """Turn a classification into the ledger change (pure).

    429s snooze and spend no attempt. 401/403 spend no attempt either (a
    credential outage must not exhaust healthy objects); an object refused 3
    times in a row goes dead only when other calls succeed
    (``c.credentials_proven``), which shows the credentials are fine.
    """
    attempts = op.attempt_count + 1
    if c.outcome is Outcome.CONFIRMED:
        return Finish("done", c.outcome, c.status, reason=c.reason)
    if c.outcome is Outcome.RATE_LIMITED:
        return snoozed(op.key, c, now)
    if c.outcome is Outcome.REJECTED:
        return dead(c)
    backoff = {"base": remote.backoff_base_seconds, "cap": remote.backoff_max_seconds}
    if c.outcome is Outcome.AUTH:
        refusals = op.auth_failure_count + 1
        if c.credentials_proven and refusals >= AUTH_REFUSALS_BEFORE_DEAD:
            held = f"{c.reason} on {refusals} attempts in a row while other calls succeed"
            return replace(dead(c, reason=held), auth_failure=True)
        return retried(op.key, refusals, c, now, **backoff, attempt_spent=0, auth_failure=True)
    if attempts >= remote.max_attempts:
        return dead(
            c, failure_class="max_attempts", reason=f"{attempts} attempts; last: {c.reason}"
        )
    return retried(op.key, attempts, c, now, **backoff)


def enqueue_window(conn: Connection, policy: Policy, window: Window, batch_rows: int) -> int:
    """Upsert one pending operation per eligible row of the window; returns rows inserted."""
    target = TargetTable.of(policy.table_spec, policy.remote)
    bound = target.query("batch_bound", window.tenant_scope)
    insert = target.query("ops_enqueue", window.tenant_scope)
    after, inserted = window.first_id - 1, 0
    while True:
        params: dict[str, Any] = {
            "after": after,
            "last_id": window.last_id,
            "batch_rows": batch_rows,
            "tenant": window.tenant,
            "cutoff": window.cutoff,
            "policy": policy.name,
            "revision": policy.revision,
            "table_name": policy.table,
            "window_key": window.window_key,
        }
        with bounded(conn, policy.timeouts):
            row = conn.execute(bound, params).fetchone()
            if row is None or not row["keys"]:
                return inserted
            inserted += conn.execute(insert, {**params, "upto": row["upto"]}).rowcount
        if row["keys"] < batch_rows:
            return inserted
        after = row["upto"]


@cache
def _finish_statement(policy: Policy) -> sql.Composed:
    return TargetTable.of(policy.table_spec, policy.remote).query("ops_finish")


class OperationsKind:
    """The remote-operation job kind: what the shared worker needs to delete objects."""

    table = OPERATION_ANSWERS

    def __init__(self, policy: Policy, sender: HttpSender) -> None:
        if policy.remote is None:
            raise ValueError(f"policy {policy.name!r} has no remote section")
        self.policy = policy
        self.remote: RemoteSpec = policy.remote
        self.sender = sender
        self.queue = LeasedQueue(OPERATIONS, policy.name, self.remote.lease)
        self.claim_batch = self.remote.claim_batch
        self.call_timeout_seconds = self.remote.request_timeout_seconds
        self.target = TargetTable.of(policy.table_spec, policy.remote)
        self.auth_streak = 0
        self.transactions: list[tuple[int, float]] = []  # (rows deleted, ms) per finish

    def job(self, row: dict[str, Any]) -> Operation:
        return Operation.from_row(row)

    def screen(self, conn: Connection, jobs: list[Operation]) -> dict[str, Finish]:
        """Refuse calls that could delete the wrong thing (no API call is made)."""
        rows = conn.execute(
            self.target.query("row_versions"), {"row_keys": [op.row_key for op in jobs]}
        )
        versions = {row["row_key"]: row["version"] for row in rows}
        refused: dict[str, Finish] = {}
        for op in jobs:
            current = versions.get(op.row_key)
            if current is not None and current != op.version:
                refused[op.key] = Finish(
                    "dead",
                    "not_called",
                    None,
                    "superseded",
                    f"row {op.row_key} is now version {current}, not {op.version} (restored?); "
                    "the object was not deleted",
                    attempt_spent=0,
                )
            elif "{tenant_id}" in self.remote.endpoint and not op.tenant:
                refused[op.key] = Finish(
                    "dead",
                    "not_called",
                    None,
                    "missing_tenant",
                    "the endpoint needs {tenant_id} but the row has no tenant",
                    attempt_spent=0,
                )
        return refused

    def send(self, job: Operation) -> HttpResult:
        return self.sender.send(
            self.remote.method,
            endpoint_for(self.remote, job.object_id, job.tenant),
            headers={self.remote.idempotency_header: job.operation_key},
        )

    def refine(self, conn: Connection, c: Classification, stats: WorkerStats) -> Classification:
        """For 401/403: did this worker, or the policy within the hour, get confirmations?"""
        if c.outcome is not Outcome.AUTH:
            return c
        proven = bool(stats.outcomes[Outcome.CONFIRMED.value])
        if not proven:
            row = conn.execute(query("recent_confirmations"), {"policy": self.policy.name})
            proven = bool(row.fetchone()["recent"])  # type: ignore[index]
        return replace(c, credentials_proven=proven)

    def decide(self, job: Operation, c: Classification, now: dt.datetime) -> Finish:
        return decide_operation(job, c, now, self.remote)

    def after(self, conn: Connection, job: Operation, c: Classification) -> Stop | None:
        """A streak of 401/403 across objects is a credential problem: stop, spend nothing."""
        if c.outcome is not Outcome.AUTH:
            self.auth_streak = 0
            return None
        self.auth_streak += 1
        if self.auth_streak < self.remote.auth_failure_limit:
            return None
        return Stop(
            "credentials",
            CredentialFailure(
                f"policy {self.policy.name!r}: {self.auth_streak} calls in a row to "
                f"connection {self.remote.http_conn_id!r} answered HTTP {c.status}; the "
                "credentials are wrong or revoked. Stopping instead of dead-lettering every "
                "object; the operations stay pending. Fix the connection and rerun."
            ),
        )

    def record(
        self,
        conn: Connection,
        owner: str,
        attempts: list[Attempt],
        scope: str | None,
        elapsed_ms: float,
    ) -> dict[str, int]:
        """The atomic finish of a batch; a row that cannot be deleted goes dead on its own.

        If the batch's statement fails (a row that cannot be deleted: a foreign
        key, a trigger, a lock held past ``lock_timeout``), each outcome is
        recorded on its own, and one whose row cannot be deleted goes dead as
        ``local_delete_failed`` rather than stalling its batch on every run.
        """
        try:
            return self._finish(conn, owner, attempts, scope)
        except psycopg.Error:
            if len(attempts) == 1:
                failed = attempts[0]
                if failed.finish.state != "done":
                    raise
                dead = Finish(
                    "dead",
                    failed.finish.outcome,
                    failed.finish.status,
                    "local_delete_failed",
                    "the API confirmed the deletion but the local row could not be deleted",
                )
                retry = Attempt(failed.job, dead, failed.started, failed.finished)
                return self._finish(conn, owner, [retry], scope)
        recorded: dict[str, int] = {}
        for attempt in attempts:
            recorded.update(self.record(conn, owner, [attempt], scope, elapsed_ms))
        return recorded

    def _finish(
        self, conn: Connection, owner: str, attempts: list[Attempt], scope: str | None
    ) -> dict[str, int]:
        """One ``ops_finish.sql`` statement, and the window's tally, in one bounded transaction.

        The tally (``window_batch_done.sql``) commits with the deletions it
        counts, so a window's figures never disagree with the table; the batch
        time it records is this transaction's, as for row windows.
        """
        utc = dt.UTC
        began = time.perf_counter()
        with bounded(conn, self.policy.timeouts, synchronous_commit=False):
            rows = conn.execute(
                _finish_statement(self.policy),
                {
                    "owner": owner,
                    "policy": self.policy.name,
                    "notify": self.policy.notify is not None,
                    "keys": [a.job.key for a in attempts],
                    "states": [a.finish.state for a in attempts],
                    "attempt_spent": [a.finish.attempt_spent for a in attempts],
                    "rate_limited": [a.finish.rate_limited for a in attempts],
                    "auth_failure": [a.finish.auth_failure for a in attempts],
                    "not_before": [a.finish.not_before for a in attempts],
                    "status": [a.finish.status for a in attempts],
                    "outcome": [a.finish.outcome for a in attempts],
                    "failure_class": [a.finish.failure_class for a in attempts],
                    "reason": [a.finish.reason[:300] for a in attempts],
                    "started_at": [dt.datetime.fromtimestamp(a.started, utc) for a in attempts],
                    "finished_at": [dt.datetime.fromtimestamp(a.finished, utc) for a in attempts],
                    "duration_ms": [(a.finished - a.started) * 1000 for a in attempts],
                },
                prepare=True,
            ).fetchall()
            recorded = {row["op_key"]: int(row["rows_deleted"]) for row in rows}
            deleted = sum(recorded.values())
            elapsed_ms = (time.perf_counter() - began) * 1000
            if scope is not None and recorded:
                conn.execute(
                    query("window_batch_done"),
                    {"window_key": scope, "deleted": deleted, "batch_ms": elapsed_ms},
                    prepare=True,
                )
        if recorded:
            self.transactions.append((deleted, elapsed_ms))
        return recorded
