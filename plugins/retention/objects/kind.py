"""Remote deletions as job kinds of the leased queue (``retention.operations``).

:class:`ObjectKind` is everything a kind of remote object shares: claimed rows
become :class:`~retention.objects.keys.Operation`\\ s, the screen refuses
calls that could delete the wrong thing, :func:`~retention.objects.decide.decide_operation`
decides, and :class:`~retention.objects.finish.AtomicFinish` records. A
concrete kind brings its transport: ``attempt`` (do the deletion, say what the
answer means) and ``refuse`` (what its transport cannot safely be given).
:class:`OperationsKind` is the HTTP one: the policy's endpoint, the 404
breaker, and the credential streak.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from dataclasses import replace
from typing import Any

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query
from retention.holds.store import Hold
from retention.objects.decide import (
    OperationClassification,
    decide_operation,
    held_finish,
    known,
    not_called,
)
from retention.objects.finish import AtomicFinish
from retention.objects.keys import Operation, safe_endpoint
from retention.policy.model import MAIN_RESOURCE, Policy, RemoteSpec
from retention.queue.classify import (
    OPERATION_ANSWERS,
    OPERATION_ANSWERS_STRICT,
    Classification,
    Outcome,
    classify,
)
from retention.queue.http import HttpResult, HttpSender
from retention.queue.leased import OPERATIONS, Finish, LeasedQueue, Priority, State
from retention.queue.rate_headers import read_quota
from retention.queue.worker import Attempt, Recorded, Stop
from retention.rows.cutoff import latest_cutoff
from retention.rows.target import TargetTable

log = logging.getLogger(__name__)

# An erasure deletes every row of its scope whatever its age: the "cutoff" its operations
# are screened against is later than any timestamp a row can have.
ERASURE_CUTOFF = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)


class CredentialFailure(RuntimeError):
    """A streak of 401/403 answers: the credentials are wrong, not the objects."""


class EndpointSuspect(RuntimeError):
    """The first answers were all 404: the endpoint template or connection is wrong."""


class ObjectKind:
    """A kind of remote object deletion, without its transport (see the module's docstring)."""

    def __init__(self, policy: Policy) -> None:
        if policy.remote is None:
            raise ValueError(f"policy {policy.name!r} has no remote section")
        self.policy = policy
        self.remote: RemoteSpec = policy.remote
        self.queue = LeasedQueue(OPERATIONS, policy.name, self.remote.lease)
        self.call_timeout_seconds = self.remote.request_timeout_seconds
        self.target = TargetTable.of(policy.table_spec, policy.remote)
        self.finisher = AtomicFinish(policy)

    @property
    def claim_batch(self) -> int:
        return self.remote.claim_batch

    def job(self, row: dict[str, Any]) -> Operation:
        return Operation.from_row(row)

    def attempt(self, conn: Connection, job: Operation) -> Classification:
        """Delete ``job``'s object by this kind's transport; what the answer means."""
        raise NotImplementedError

    def refuse(self, op: Operation) -> tuple[str, str] | None:
        """Why this kind's transport must not be given ``op`` (failure class, reason)."""
        return None

    def close(self) -> None:
        """Release the transport (a session, a client)."""

    def screen(self, conn: Connection, jobs: list[Operation]) -> dict[str, Finish]:
        """Refuse calls that could delete the wrong thing (no call is made).

        An operation whose object a legal hold keeps (a hold on its key, tenant
        or object id, or the row's ``hold_column``) goes ``held``, spending no
        attempt; this check is the last before the call, so a hold placed while
        the operation waited applies. A restored row (new version), a row whose
        object or tenant changed, or one that is no longer older than its
        window's cutoff is ``superseded``;
        what the transport refuses (an object id or tenant that cannot be a path
        segment) is dead as it says; a confirmed deletion whose local delete
        failed for a moment is completed without calling again.
        """
        current = self._rows_now(conn, jobs)
        holds = self._holds_now(conn, jobs)
        refused: dict[str, Finish] = {}
        for op in jobs:
            row = current.get(op.key)
            keeping = holds.get(op.key, [])
            if keeping or (row is not None and row["held"]):
                refused[op.key] = self._held(op, keeping)
            elif op.local_delete_pending:
                refused[op.key] = Finish(
                    state=State.DONE,
                    outcome=Outcome.LOCAL_DELETE_RETRY,
                    status=op.last_status_code,
                    reason="the API had confirmed; the local delete is retried",
                    attempt_spent=0,
                )
            elif row is not None and (changed := _changed(op, row)):
                refused[op.key] = not_called("superseded", f"{changed}; the object was kept")
            elif (why := self.refuse(op)) is not None:
                refused[op.key] = not_called(*why)
        return refused

    def _held(self, op: Operation, keeping: list[Hold]) -> Finish:
        """The held finish, naming what keeps the object; an operation whose call was
        already confirmed keeps that mark, so that once released only its row is deleted."""
        if keeping:
            why = "kept by " + "; ".join(hold.described for hold in keeping)
        else:
            why = f"kept by the row's hold_column {self.policy.hold_column}"
        finish = held_finish(why[:300])
        if op.local_delete_pending:
            return replace(finish, failure_class=op.failure_class)
        return finish

    def _holds_now(self, conn: Connection, jobs: list[Operation]) -> dict[str, list[Hold]]:
        """The active holds keeping each operation's object (by key, tenant or object id)."""
        rows = conn.execute(
            self.target.query("hold_for_operations"),
            {
                "hold_policy": self.policy.name,
                "row_keys": [op.row_key for op in jobs],
                "tenants": [op.tenant for op in jobs],
                "object_ids": [op.object_id for op in jobs],
            },
            prepare=True,
        ).fetchall()
        found: dict[str, list[Hold]] = {}
        for row in rows:
            op = jobs[row.pop("position") - 1]
            found.setdefault(op.key, []).append(Hold.from_row(row))
        return found

    def _rows_now(self, conn: Connection, jobs: list[Operation]) -> dict[str, dict[str, Any]]:
        """Each operation's row as it is now, keyed by operation (two may share a row).

        Each row is judged against its window's cutoff, bounded by ``now − retain_days``;
        an operation without a window (a hint's) or whose window is gone is judged against
        ``now − retain_days`` itself: no path makes a row younger than that eligible,
        except an erasure, which ignores ``retain_days`` by design: its (urgent)
        operations are judged against no cutoff (``ERASURE_CUTOFF``).
        """
        limit = latest_cutoff(self.policy.retain_days, dt.datetime.now(dt.UTC))
        windows = sorted({op.window_key for op in jobs if op.window_key})
        cutoffs: dict[str, dt.datetime] = {}
        if windows:
            rows = conn.execute(query("window_cutoffs"), {"window_keys": windows})
            cutoffs = {row["window_key"]: self._bounded_cutoff(row, limit) for row in rows}
        with bounded(conn, self.policy.timeouts, timezone=self.policy.timestamp_timezone):
            rows = conn.execute(
                self.target.query("ops_screen"),
                {
                    "row_keys": [op.row_key for op in jobs],
                    "cutoffs": [
                        ERASURE_CUTOFF
                        if op.priority == Priority.URGENT
                        else cutoffs.get(op.window_key or "", limit)
                        for op in jobs
                    ],
                    "hold_policy": self.policy.name,
                },
                prepare=True,
            ).fetchall()
        return {jobs[row["position"] - 1].key: row for row in rows}

    def _bounded_cutoff(self, window: dict[str, Any], limit: dt.datetime) -> dt.datetime:
        """A window's cutoff, never later than ``limit`` (``now − retain_days``): a window
        planned with a cutoff in the future (by a release without that rule, or a hand-edited
        ledger) must not make a young row's object eligible; such an operation is
        ``superseded``. It is clamped, not refused: the drain works every policy's due
        operations in one pass, and one bad window must not stop the others."""
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

    def decide(self, job: Operation, c: Classification, now: dt.datetime) -> Finish:
        return decide_operation(job, c, now, self.remote)

    def after(self, conn: Connection, job: Operation, c: Classification) -> Stop | None:
        """Nothing stops a pass by default; a transport with streaks to watch says so."""
        return None

    def prepare(self, conn: Connection) -> None:
        """Before a pass's first call: what the finish reads from the catalog (the
        policy's children), so a problem there fails the pass before any call."""
        self.finisher.prepare(conn)

    def record(
        self, conn: Connection, owner: str, attempts: list[Attempt], scope: str | None
    ) -> Recorded:
        """The atomic finish (``retention.objects.finish``)."""
        return self.finisher.record(conn, owner, attempts, scope)


class OperationsKind(ObjectKind):
    """Remote deletions over HTTP: one call per object to the policy's endpoint."""

    def __init__(self, policy: Policy, sender: HttpSender) -> None:
        super().__init__(policy)
        self.sender = sender
        # Each resource's endpoint, method and answer table (its own not_found_is_deleted).
        self.calls = {
            resource: (
                endpoint,
                method,
                OPERATION_ANSWERS if not_found_is_deleted else OPERATION_ANSWERS_STRICT,
            )
            for resource in self.remote.resources
            for endpoint, method, not_found_is_deleted in [self.remote.call_of(resource)]
        }
        # Per resource: a 2xx seen (this task, or the last day); a derivative's endpoint
        # is proven by its own answers, not by the object's.
        self.endpoint_verified: dict[str, bool] = {}
        self.held_404s: Counter[str] = Counter()  # per resource
        self.auth_streak = 0
        self.confirmed = 0  # confirmations this kind has seen (proof the credentials work)

    def close(self) -> None:
        self.sender.close()

    def refuse(self, op: Operation) -> tuple[str, str] | None:
        """A missing tenant the endpoint needs, or a path that leaves the endpoint's shape."""
        if op.resource not in self.calls:
            return "unknown_resource", (
                f"the policy has no resource {op.resource!r} any more (remote.derivatives)"
            )
        if "{tenant_id}" in self.calls[op.resource][0] and op.tenant is None:
            return "missing_tenant", "the endpoint needs {tenant_id} but the row has no tenant"
        path, why = safe_endpoint(self.remote, op)
        return ("invalid_object_id", why) if path is None else None

    def send(self, job: Operation) -> HttpResult:
        """The one HTTP call of an operation, with its key as the idempotency header."""
        path, why = safe_endpoint(self.remote, job)
        if path is None:  # screen() refuses these; never send one by another route
            raise ValueError(f"operation {job.key}: {why}")
        return self.sender.send(
            self.calls[job.resource][1],
            path,
            headers={self.remote.idempotency_header: job.operation_key},
        )

    def attempt(self, conn: Connection, job: Operation) -> OperationClassification:
        """Call the endpoint and classify the answer with the policy's table."""
        result = self.send(job)
        now = dt.datetime.now(dt.UTC)
        if result.status is not None and result.status in self.remote.held_statuses:
            return OperationClassification(
                Outcome.HELD,
                result.status,
                "remote_held",
                None,
                f"the API answered {result.status}, which remote.held_statuses reads as "
                "the remote side holding the object; re-checked on the next run",
                quota=read_quota(result.headers, now.timestamp()),  # the pace holds all the same
            )
        c = classify(result.status, result.headers, result.error, now, self.calls[job.resource][2])
        return self._refine(conn, known(c), job.resource)

    def _refine(
        self, conn: Connection, c: OperationClassification, resource: str
    ) -> OperationClassification:
        """Add what the ledger knows: is a 404 trustworthy, are the credentials proven?

        A 404 counts as a deletion only once the endpoint has answered 2xx (in
        this task, or for this policy within the last day); before that it is
        held back, because a wrong template or host answers 404 to everything.
        Each resource's endpoint is judged by its own answers: a derivative's wrong
        template is not proven right by the object's 2xx.
        """
        if c.outcome is Outcome.CONFIRMED:
            self.confirmed += 1
        if c.status is not None and 200 <= c.status < 300:
            self.endpoint_verified[resource] = True
        if c.status == 404 and c.outcome is Outcome.CONFIRMED and self.remote.not_found_breaker:
            if resource not in self.endpoint_verified:
                row = conn.execute(
                    query("attempt_recent_success"),
                    {"policy": self.policy.name, "resource": resource},
                )
                self.endpoint_verified[resource] = bool(row.fetchone()["verified"])  # type: ignore[index]
            if not self.endpoint_verified[resource]:
                return replace(c, endpoint_unverified=True)
        if c.outcome is not Outcome.AUTH:
            return c
        proven = bool(self.confirmed)  # other calls of this kind were confirmed
        if not proven:
            row = conn.execute(query("attempt_recent_confirmations"), {"policy": self.policy.name})
            proven = bool(row.fetchone()["recent"])  # type: ignore[index]
        return replace(c, credentials_proven=proven)

    def after(self, conn: Connection, job: Operation, c: Classification) -> Stop | None:
        """Stop on a credential problem (a 401/403 streak) or a suspect endpoint (only 404s)."""
        if known(c).endpoint_unverified:
            self.held_404s[job.resource] += 1
            limit = self.remote.not_found_breaker
            if self.held_404s[job.resource] >= limit:
                endpoint, method, _ = self.calls[job.resource]
                return Stop(
                    "not_found_breaker",
                    EndpointSuspect(
                        f"policy {self.policy.name!r}: {limit} answers of "
                        f"{method} {endpoint}{_derivative(job.resource)} on connection "
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


def _derivative(resource: str) -> str:
    """`` (derivative 'thumbnails')`` after a derivative's endpoint in a message; nothing
    after the object's own."""
    return "" if resource == MAIN_RESOURCE else f" (derivative {resource!r})"


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
