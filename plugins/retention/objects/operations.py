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
import re
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
from retention.queue.classify import (
    OPERATION_ANSWERS,
    OPERATION_ANSWERS_STRICT,
    Classification,
    Outcome,
)
from retention.queue.decisions import dead, retried, snoozed
from retention.queue.http import HttpResult, HttpSender
from retention.queue.leased import OPERATIONS, Finish, LeasedQueue
from retention.queue.worker import Attempt, Stop, WorkerStats
from retention.rows.cutoff import latest_cutoff
from retention.rows.locks import row_lock_holders
from retention.rows.target import TargetTable
from retention.rows.windows import Window

log = logging.getLogger(__name__)

AUTH_REFUSALS_BEFORE_DEAD = 3
LOCAL_DELETE_PENDING = "local_delete_pending"
LOCAL_DELETE_RETRY_SECONDS = 30.0
LOCK_LOOKUP_REUSE_SECONDS = 10.0  # a lock holder lookup serves the rows after it this long
NOT_FOUND_HOLD_SECONDS = 60.0
MAX_ID_BYTES = 1024
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
# A row that cannot be deleted for good: only these dead-letter a confirmed deletion.
PERMANENT_DELETE_ERRORS: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.ForeignKeyViolation,
    psycopg.errors.RestrictViolation,
    psycopg.errors.RaiseException,  # a trigger refused it
)
# A delete that may work a moment later: the confirmation is kept and the delete retried.
TRANSIENT_DELETE_ERRORS: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.LockNotAvailable,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
    psycopg.errors.QueryCanceled,
    psycopg.errors.OperationalError,
)


class CredentialFailure(RuntimeError):
    """A streak of 401/403 answers: the credentials are wrong, not the objects."""


class EndpointSuspect(RuntimeError):
    """The first answers were all 404: the endpoint template or connection is wrong."""


def operation_key(policy: str, revision: int, table: str, row_key: int, version: str) -> str:
    """The same key the ledger's SQL derives (``TargetTable.operation_key_expr``)."""
    text = "|".join((policy, str(revision), table, str(row_key), version))
    return hashlib.sha256(text.encode()).hexdigest()


def endpoint_for(remote: RemoteSpec, object_id: str, tenant: str | None) -> str:
    """The policy's endpoint with ``{object_id}`` and ``{tenant_id}`` URL-encoded."""
    return remote.endpoint.format(
        object_id=quote(str(object_id), safe=""), tenant_id=quote(str(tenant or ""), safe="")
    )


def bad_path_value(value: str | None) -> str | None:
    """Why an object id or tenant cannot be a path segment (None when it can).

    URL-encoding leaves ``.`` and ``..`` as they are, and an empty segment
    collapses the path: each would send the call to a parent resource, whose
    404 would then count as a confirmed deletion.
    """
    if value is None or value == "":
        return "is empty"
    if value in (".", ".."):
        return f"is the dot segment {value!r}"
    if CONTROL_CHARACTERS.search(value):
        return "contains control characters"
    if len(value.encode()) > MAX_ID_BYTES:
        return f"is longer than {MAX_ID_BYTES} bytes"
    return None


@cache
def _endpoint_shape(endpoint: str) -> tuple[str, int]:
    """An endpoint template's fixed prefix and its number of ``/`` once filled in."""
    return endpoint.split("{", 1)[0], endpoint.format(object_id="x", tenant_id="x").count("/")


def safe_endpoint(remote: RemoteSpec, op: Operation) -> tuple[str | None, str]:
    """The endpoint of one operation, or None and why it must not be called."""
    checks = [("object id", op.object_id)]
    if "{tenant_id}" in remote.endpoint:
        checks.append(("tenant", op.tenant))
    for what, value in checks:
        problem = bad_path_value(value)
        if problem:
            return None, f"the {what} {problem}; no request was made"
    path = endpoint_for(remote, op.object_id, op.tenant)
    prefix, slashes = _endpoint_shape(remote.endpoint)
    if not path.startswith(prefix) or path.count("/") != slashes:
        return None, f"the rendered path {path[:200]!r} leaves the endpoint's shape"
    return path, ""


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
    failure_class: str | None = None
    last_status_code: int | None = None

    @property
    def key(self) -> str:
        return self.operation_key

    @property
    def local_delete_pending(self) -> bool:
        """The API confirmed; only the local delete is left (it failed for a moment)."""
        return self.failure_class == LOCAL_DELETE_PENDING

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
    if c.outcome is Outcome.CONFIRMED and c.endpoint_unverified:
        return Finish(
            "pending",
            "not_found_unverified",
            c.status,
            "not_found_breaker",
            "404 held back until the endpoint has answered 2xx (the endpoint template or "
            "connection may be wrong); no attempt spent",
            now + dt.timedelta(seconds=NOT_FOUND_HOLD_SECONDS),
            attempt_spent=0,
        )
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
        with bounded(conn, policy.timeouts, timezone=policy.timestamp_timezone):
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

    def __init__(self, policy: Policy, sender: HttpSender) -> None:
        if policy.remote is None:
            raise ValueError(f"policy {policy.name!r} has no remote section")
        self.policy = policy
        self.remote: RemoteSpec = policy.remote
        self.sender = sender
        self.queue = LeasedQueue(OPERATIONS, policy.name, self.remote.lease)
        self.table = (
            OPERATION_ANSWERS if self.remote.not_found_is_deleted else OPERATION_ANSWERS_STRICT
        )
        self.endpoint_verified: bool | None = None  # a 2xx seen (this task, or the last day)
        self.held_404s = 0
        self.call_timeout_seconds = self.remote.request_timeout_seconds
        self._holders_seen: tuple[float, int, str] | None = None  # see _lock_holders
        self.target = TargetTable.of(policy.table_spec, policy.remote)
        self.auth_streak = 0
        self.transactions: list[tuple[int, float]] = []  # (rows deleted, ms) per finish
        self.adjusted: dict[str, Finish] = {}  # outcomes the completer changed (see worker)

    @property
    def claim_batch(self) -> int:
        return self.remote.claim_batch

    def job(self, row: dict[str, Any]) -> Operation:
        return Operation.from_row(row)

    def screen(self, conn: Connection, jobs: list[Operation]) -> dict[str, Finish]:
        """Refuse calls that could delete the wrong thing (no API call is made).

        A restored row (new version), a row whose object or tenant changed, or
        one that is no longer older than its window's cutoff is ``superseded``;
        an object id or tenant that cannot be a path segment is
        ``invalid_object_id``; a confirmed deletion whose local delete failed for
        a moment is completed without calling again.
        """
        current = self._rows_now(conn, jobs)
        refused: dict[str, Finish] = {}
        for op in jobs:
            row = current.get(op.key)
            if op.local_delete_pending:
                refused[op.key] = Finish(
                    "done",
                    "local_delete_retry",
                    op.last_status_code,
                    reason="the API had confirmed; the local delete is retried",
                    attempt_spent=0,
                )
            elif row is not None and (changed := _changed(op, row)):
                refused[op.key] = _not_called("superseded", f"{changed}; the object was kept")
            elif "{tenant_id}" in self.remote.endpoint and op.tenant is None:
                refused[op.key] = _not_called(
                    "missing_tenant", "the endpoint needs {tenant_id} but the row has no tenant"
                )
            else:
                path, why = safe_endpoint(self.remote, op)
                if path is None:
                    refused[op.key] = _not_called("invalid_object_id", why)
        return refused

    def _rows_now(self, conn: Connection, jobs: list[Operation]) -> dict[str, dict[str, Any]]:
        """Each operation's row as it is now, keyed by operation (two may share a row)."""
        windows = sorted({op.window_key for op in jobs if op.window_key})
        cutoffs: dict[str, dt.datetime] = {}
        if windows:
            rows = conn.execute(query("windows_cutoffs"), {"window_keys": windows})
            cutoffs = {row["window_key"]: self._bounded_cutoff(row) for row in rows}
        with bounded(conn, self.policy.timeouts, timezone=self.policy.timestamp_timezone):
            rows = conn.execute(
                self.target.query("ops_screen"),
                {
                    "row_keys": [op.row_key for op in jobs],
                    "cutoffs": [cutoffs.get(op.window_key or "") for op in jobs],
                },
                prepare=True,
            ).fetchall()
        return {jobs[row["position"] - 1].key: row for row in rows}

    def _bounded_cutoff(self, window: dict[str, Any]) -> dt.datetime:
        """A window's cutoff, never later than ``now − retain_days``: a window planned with
        a cutoff in the future (by a release without that rule, or a hand-edited ledger) must
        not make a young row's object eligible; such an operation is ``superseded``."""
        limit = latest_cutoff(self.policy.retain_days, dt.datetime.now(dt.UTC))
        cutoff: dt.datetime = window["cutoff"]
        if cutoff <= limit:
            return cutoff
        log.warning(
            "policy %s: window %s has the cutoff %s, later than now − retain_days; its "
            "operations are screened against %s instead",
            self.policy.name,
            window["window_key"],
            cutoff.isoformat(),
            limit.isoformat(),
        )
        return limit

    def send(self, job: Operation) -> HttpResult:
        path, why = safe_endpoint(self.remote, job)
        if path is None:  # screen() refuses these; never send one by another route
            raise ValueError(f"operation {job.key}: {why}")
        return self.sender.send(
            self.remote.method,
            path,
            headers={self.remote.idempotency_header: job.operation_key},
        )

    def refine(self, conn: Connection, c: Classification, stats: WorkerStats) -> Classification:
        """Add what the ledger knows: is a 404 trustworthy, are the credentials proven?

        A 404 counts as a deletion only once the endpoint has answered 2xx (in
        this task, or for this policy within the last day); before that it is
        held back, because a wrong template or host answers 404 to everything.
        """
        if c.status is not None and 200 <= c.status < 300:
            self.endpoint_verified = True
        if c.status == 404 and c.outcome is Outcome.CONFIRMED and self.remote.not_found_breaker:
            if self.endpoint_verified is None:
                row = conn.execute(query("recent_success"), {"policy": self.policy.name})
                self.endpoint_verified = bool(row.fetchone()["verified"])  # type: ignore[index]
            if not self.endpoint_verified:
                return replace(c, endpoint_unverified=True)
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
        """Stop on a credential problem (a 401/403 streak) or a suspect endpoint (only 404s)."""
        if c.endpoint_unverified:
            self.held_404s += 1
            limit = self.remote.not_found_breaker
            if self.held_404s >= limit:
                return Stop(
                    "not_found_breaker",
                    EndpointSuspect(
                        f"policy {self.policy.name!r}: {limit} answers of "
                        f"{self.remote.method} {self.remote.endpoint} on connection "
                        f"{self.remote.http_conn_id!r} were 404, and the API has not answered "
                        "2xx in this task or the last day: the endpoint template or connection "
                        "is probably wrong. Nothing was deleted on these answers; the "
                        "operations stay pending. Fix the template or connection, or set "
                        "remote.not_found_breaker: 0 if the objects are really gone."
                    ),
                )
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
        """The atomic finish of a batch; a row that cannot be deleted never stalls its batch.

        If the batch's statement fails (a foreign key, a trigger, a lock held
        past ``lock_timeout``), each outcome is recorded on its own, and one
        whose local delete fails is handled by :meth:`_local_delete_failed`.
        A lost connection records nothing: the leases expire and the calls are
        re-driven with the same keys.
        """
        try:
            return self._finish(conn, owner, attempts, scope)
        except psycopg.Error as failed:
            if conn.broken or conn.closed:
                raise
            if len(attempts) > 1:
                return self._one_by_one(conn, owner, attempts, scope, elapsed_ms)
            if not isinstance(failed, PERMANENT_DELETE_ERRORS + TRANSIENT_DELETE_ERRORS):
                raise  # a setup problem (privileges, a dropped column): fail loudly, keep nothing
            permanent = isinstance(failed, PERMANENT_DELETE_ERRORS)
            return self._local_delete_failed(conn, owner, attempts[0], scope, permanent, failed)

    def _lock_holders(self, conn: Connection, row_key: int) -> str:
        """Who holds the lock a local delete timed out on, looked up at most once per
        ``LOCK_LOOKUP_REUSE_SECONDS``: behind a table lock every row of a batch times
        out in turn, and each lookup would cost another wait."""
        now = time.monotonic()
        if self._holders_seen is not None:
            seen_at, seen_row, text = self._holders_seen
            if now - seen_at < LOCK_LOOKUP_REUSE_SECONDS:
                return f"; as looked up for row {seen_row} {now - seen_at:.0f} s ago: {text}"
        text = row_lock_holders(conn, self.policy.table_spec, row_key)
        self._holders_seen = (now, row_key, text)
        return f"; {text}"

    def _one_by_one(
        self,
        conn: Connection,
        owner: str,
        attempts: list[Attempt],
        scope: str | None,
        elapsed_ms: float,
    ) -> dict[str, int]:
        recorded: dict[str, int] = {}
        for attempt in attempts:
            recorded.update(self.record(conn, owner, [attempt], scope, elapsed_ms))
        return recorded

    def _local_delete_failed(
        self,
        conn: Connection,
        owner: str,
        attempt: Attempt,
        scope: str | None,
        permanent: bool,
        error: psycopg.Error,
    ) -> dict[str, int]:
        """A confirmed deletion whose local delete failed: dead for good, or retried.

        A foreign key or a trigger refusing the delete will refuse it again:
        the operation goes dead as ``local_delete_failed``. A lock timeout, a
        deadlock, a serialization failure or a cancel is transient: the operation
        stays confirmed with ``local_delete_pending`` and the next pass deletes
        the row without calling the API again. Any other error (privileges, a
        changed schema) fails the task instead. A lost connection records
        nothing at all: the lease expires and the call is re-driven with the
        same key, which the API answers as already done.
        """
        if attempt.finish.state != "done":
            raise error
        what = f"{type(error).__name__}: {error}".strip()[:200]
        if permanent:
            change = Finish(
                "dead",
                attempt.finish.outcome,
                attempt.finish.status,
                "local_delete_failed",
                f"the API confirmed the deletion but the local row cannot be deleted ({what})",
            )
        else:
            change = Finish(
                "pending",
                Outcome.CONFIRMED,
                attempt.finish.status,
                LOCAL_DELETE_PENDING,
                f"the API confirmed the deletion; the local delete failed for now ({what}) "
                "and is retried",
                dt.datetime.now(dt.UTC) + dt.timedelta(seconds=LOCAL_DELETE_RETRY_SECONDS),
                attempt_spent=1,  # the call that confirmed was a real attempt
            )
        locked = isinstance(error, psycopg.errors.LockNotAvailable)
        log.warning(
            "row %s: local delete %s after the API confirmed: %s%s (operation %s)",
            attempt.job.row_key,
            "failed for good" if permanent else "failed for now, retried later",
            what,
            self._lock_holders(conn, attempt.job.row_key) if locked else "",
            attempt.job.key,
        )
        retry = Attempt(attempt.job, change, attempt.started, attempt.finished)
        self.adjusted[attempt.job.key] = change
        return self._finish(conn, owner, [retry], scope)

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
        with bounded(
            conn,
            self.policy.timeouts,
            synchronous_commit=False,
            timezone=self.policy.timestamp_timezone,
        ):
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
            left_alone = [row["op_key"] for row in rows if row["row_left_alone"]]
            if left_alone:
                conn.execute(query("ops_mark_superseded"), {"keys": left_alone})
                log.warning(
                    "%d confirmed deletion(s) left their row alone: it changed before its "
                    "local delete (superseded): %s",
                    len(left_alone),
                    left_alone[:5],
                )
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


def _not_called(failure_class: str, reason: str) -> Finish:
    return Finish("dead", "not_called", None, failure_class, reason, attempt_spent=0)


def _changed(op: Operation, row: dict[str, Any]) -> str | None:
    """How the row differs from what the operation was made for (None when it does not)."""
    if row["version"] != op.version:
        return f"row {op.row_key} is now version {row['version']}, not {op.version} (restored?)"
    if row["object_id"] != op.object_id:
        return f"row {op.row_key} now names object {row['object_id']!r}, not {op.object_id!r}"
    if row["tenant"] != op.tenant:
        return f"row {op.row_key} now belongs to tenant {row['tenant']!r}, not {op.tenant!r}"
    if not row["still_eligible"]:
        return f"row {op.row_key} is no longer older than its window's cutoff"
    return None
