"""One leased queue (River's model) with two job kinds: remote operations and outbox events.

A job is a row of its kind's table (``retention.operations``, ``retention.outbox``);
the statements are the same for both, parameterised by table and column names
through :mod:`psycopg.sql` identifiers:

- **claim**: ``FOR UPDATE SKIP LOCKED``, expired leases first, then pending jobs
  that are due, urgent before routine (a kind with priorities: the operations,
  whose urgent jobs are erasures'), in one short transaction that commits before
  any HTTP call;
- **renew**: extends the leases a worker still holds and tells it which ones it
  lost (a worker that lost a lease stops working that job);
- **release**: unstarted jobs back to pending, no attempt spent;
- **complete**: record outcomes (done, retry, snooze, dead), guarded by the
  lease owner, so a stale worker's result never overwrites a newer claim;
  **snooze** and **dead_letter** are completions of one job;
- **replay**: dead jobs back to pending, with an audit row;
- **figures**: the oldest pending and leased jobs' ages and the dead count, for the
  metrics every worker pass sends.

Every function is one statement or one short transaction.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any

import psycopg
from psycopg import sql

from retention.db.connection import Connection, set_local
from retention.db.sqlfiles import query
from retention.queue.classify import Outcome

log = logging.getLogger(__name__)


class State(StrEnum):
    """The state of a job in its kind's table (a member is its string, as the SQL expects)."""

    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    DONE = "done"  # operations: deleted remotely and locally
    DEAD = "dead"
    DELIVERED = "delivered"  # events: the receiver answered 2xx
    HELD = "held"  # operations: a legal hold keeps the object; no claim until it is lifted


class Priority(StrEnum):
    """Which due jobs are claimed first: urgent ones (an erasure's), then routine ones."""

    URGENT = "urgent"
    ROUTINE = "routine"


@dataclass(frozen=True)
class QueueTable:
    """Where a job kind lives, and what its table calls the queue's columns."""

    kind: str
    table: str
    id_column: str
    attempts_column: str
    reason_column: str
    done_column: str
    done_state: State
    scope_column: str | None = None
    # A text column naming the job's priority ('urgent' before anything else), or None
    # for a kind whose jobs are all alike (events).
    priority_column: str | None = None
    replay_resets: tuple[str, ...] = ()
    # A kind whose completion does more than change the job (the operations'
    # atomic finish also deletes the row and writes the event) must complete
    # through its own statement; the generic one refuses its done state.
    own_completer: bool = False

    def statement(self, name: str, **extra: sql.Composable) -> sql.Composed:
        """A queue SQL file composed for this table."""
        resets = sql.SQL("").join(
            sql.SQL("{} = 0, ").format(sql.Identifier(column)) for column in self.replay_resets
        )
        return query(
            name,
            table=sql.Identifier("retention", self.table),
            id=sql.Identifier(self.id_column),
            q_id=sql.Identifier("q", self.id_column),
            attempts=sql.Identifier(self.attempts_column),
            q_attempts=sql.Identifier("q", self.attempts_column),
            reason=sql.Identifier(self.reason_column),
            done_at=sql.Identifier(self.done_column),
            q_done_at=sql.Identifier("q", self.done_column),
            resets=resets,
            **extra,
        )


OPERATIONS = QueueTable(
    kind="operations",
    table="operations",
    id_column="operation_key",
    attempts_column="attempt_count",
    reason_column="reason",
    done_column="done_at",
    done_state=State.DONE,
    scope_column="window_key",
    priority_column="priority",
    replay_resets=("auth_failure_count",),
    own_completer=True,
)
EVENTS = QueueTable(
    kind="events",
    table="outbox",
    id_column="event_id",
    attempts_column="attempts",
    reason_column="last_error",
    done_column="delivered_at",
    done_state=State.DELIVERED,
)


@dataclass(frozen=True, kw_only=True)
class Finish:
    """How to record an attempt: the job's new state and the counters it moves."""

    state: State
    outcome: Outcome
    status: int | None = None
    failure_class: str | None = None
    reason: str = ""
    not_before: dt.datetime | None = None
    attempt_spent: int = 1
    rate_limited: int = 0
    auth_failure: bool = False


@dataclass(frozen=True)
class QueueFigures:
    """A policy's queue of one kind at one moment (ages in seconds since enqueued; None:
    no job in that state)."""

    oldest_pending_seconds: float | None
    oldest_leased_seconds: float | None
    dead: int


FIGURES_STATEMENT_MS = 2000  # the figures are worth a short read, never a long one


@cache
def _claim_statement(
    table: QueueTable, state: State, scoped: bool, urgent_only: bool = False
) -> sql.Composed:
    scope_filter: sql.Composable = sql.SQL("TRUE")
    if scoped:
        if table.scope_column is None:
            raise ValueError(f"{table.kind} jobs have no scope to claim by")
        scope_filter = sql.SQL("{} = %(scope)s").format(sql.Identifier(table.scope_column))
    if urgent_only:
        # matches the partial index of migration 0020 (pending urgent operations only)
        if table.priority_column is None:
            raise ValueError(f"{table.kind} jobs have no priority to claim by")
        scope_filter = sql.SQL("{} AND {} = {}").format(
            scope_filter, sql.Identifier(table.priority_column), sql.Literal(Priority.URGENT.value)
        )
    due = "lease_expires_at" if state == State.IN_FLIGHT else "not_before"
    priority_order: sql.Composable = sql.SQL("")
    if table.priority_column is not None and state == State.PENDING and not urgent_only:
        # the expression of the partial indexes of migration 0017, so the order is an index scan
        # (an urgent-only claim has one rank: its order is the due column, as in migration 0020)
        priority_order = sql.SQL("({} <> {}), ").format(
            sql.Identifier(table.priority_column), sql.Literal(Priority.URGENT.value)
        )
    return table.statement(
        "queue_claim",
        scope_filter=scope_filter,
        due_column=sql.Identifier(due),
        priority_order=priority_order,
    )


class LeasedQueue:
    """The queue of one job kind of one policy."""

    def __init__(
        self, table: QueueTable, policy: str, lease_seconds: float, *, urgent_only: bool = False
    ) -> None:
        self.table = table
        self.policy = policy
        self.lease_seconds = lease_seconds
        # An erasure's pass claims urgent jobs only: it ends when its own work is done,
        # never drifting into the routine backlog that the scheduled runs drain.
        self.urgent_only = urgent_only
        # Jobs claimed after their lease had expired (a worker lost them), by this client.
        self.reclaimed = 0

    def urgent(self) -> LeasedQueue:
        """The same queue, claiming urgent jobs only (an erasure's pass)."""
        return LeasedQueue(self.table, self.policy, self.lease_seconds, urgent_only=True)

    def claim(
        self, conn: Connection, owner: str, n: int, scope: str | None = None
    ) -> list[dict[str, Any]]:
        """Claim up to ``n`` due jobs in one short transaction: expired leases first."""
        rows: list[dict[str, Any]] = []
        params = {
            "policy": self.policy,
            "owner": owner,
            "lease_seconds": self.lease_seconds,
            "scope": scope,
        }
        with conn.transaction():
            for state in (State.IN_FLIGHT, State.PENDING):
                if len(rows) < n:
                    statement = _claim_statement(
                        self.table, state, scope is not None, self.urgent_only
                    )
                    claimed = conn.execute(
                        statement, {**params, "state": state, "n": n - len(rows)}, prepare=True
                    ).fetchall()
                    if state == State.IN_FLIGHT:  # each one a lease that expired
                        self.reclaimed += len(claimed)
                    rows += claimed
        return rows

    def figures(self, conn: Connection) -> QueueFigures | None:
        """The oldest pending and leased jobs' ages and the dead count (one short read,
        bounded by :data:`FIGURES_STATEMENT_MS`); None, logged, when the read failed: the
        figures are for a dashboard, never a reason to fail a pass."""
        try:
            with conn.transaction():
                set_local(
                    conn,
                    statement_ms=FIGURES_STATEMENT_MS,
                    lock_ms=FIGURES_STATEMENT_MS,
                    synchronous_commit=False,
                )
                row = conn.execute(
                    self.table.statement("queue_figures"), {"policy": self.policy}
                ).fetchone()
        except psycopg.Error as failed:
            log.warning(
                "policy %s: the %s queue's figures were not read (%s: %s); the pass goes on",
                self.policy,
                self.table.kind,
                type(failed).__name__,
                next(iter(str(failed).splitlines()), ""),
            )
            return None
        assert row is not None
        return QueueFigures(
            oldest_pending_seconds=row["oldest_pending_seconds"],
            oldest_leased_seconds=row["oldest_leased_seconds"],
            dead=int(row["dead"]),
        )

    def renew(self, conn: Connection, owner: str, ids: list[str]) -> set[str]:
        """Extend the leases of ``ids``; returns the ids this owner still holds."""
        if not ids:
            return set()
        rows = conn.execute(
            self.table.statement("queue_renew"),
            {"ids": ids, "owner": owner, "lease_seconds": self.lease_seconds},
        )
        return {row["job_id"] for row in rows}

    def release(self, conn: Connection, owner: str, ids: list[str]) -> set[str]:
        """Hand unstarted jobs back as pending, spending no attempt; returns those released."""
        if not ids:
            return set()
        rows = conn.execute(self.table.statement("queue_release"), {"ids": ids, "owner": owner})
        return {row["job_id"] for row in rows}

    def complete(
        self, conn: Connection, owner: str, finishes: list[tuple[str, Finish]]
    ) -> set[str]:
        """Record outcomes in one statement; returns the ids recorded (others lost their lease)."""
        if not finishes:
            return set()
        if self.table.own_completer and any(f.state == self.table.done_state for _, f in finishes):
            raise ValueError(
                f"{self.table.kind} jobs are completed by their kind's own statement; "
                "the generic completion only snoozes, retries or dead-letters them"
            )
        rows = conn.execute(
            self.table.statement("queue_finish"),
            {
                "owner": owner,
                "done_state": self.table.done_state,
                "ids": [job_id for job_id, _ in finishes],
                "states": [f.state for _, f in finishes],
                "attempt_spent": [f.attempt_spent for _, f in finishes],
                "not_before": [f.not_before for _, f in finishes],
                "status": [f.status for _, f in finishes],
                "failure_class": [f.failure_class for _, f in finishes],
                "reason": [f.reason[:300] or None for _, f in finishes],
            },
            prepare=True,
        )
        return {row["job_id"] for row in rows}

    def snooze(
        self, conn: Connection, owner: str, job_id: str, not_before: dt.datetime, reason: str
    ) -> bool:
        """Back to pending until ``not_before``, spending no attempt (River's snooze)."""
        finish = Finish(
            state=State.PENDING,
            outcome=Outcome.SNOOZED,
            reason=reason,
            not_before=not_before,
            attempt_spent=0,
        )
        return bool(self.complete(conn, owner, [(job_id, finish)]))

    def dead_letter(
        self, conn: Connection, owner: str, job_id: str, failure_class: str, reason: str
    ) -> bool:
        """Dead, for review and replay, without an attempt."""
        finish = Finish(
            state=State.DEAD,
            outcome=Outcome.DEAD_LETTERED,
            failure_class=failure_class,
            reason=reason,
            attempt_spent=0,
        )
        return bool(self.complete(conn, owner, [(job_id, finish)]))

    def replay(
        self,
        conn: Connection,
        *,
        ids: list[str] | None,
        failure_class: str | None,
        since: dt.datetime | None,
        requested_by: str,
        reason: str | None,
        filters: dict[str, Any],
    ) -> dict[str, Any]:
        """Move matching dead jobs back to pending and audit it (with ``filters`` as asked)."""
        row = conn.execute(
            self.table.statement("queue_replay"),
            {
                "kind": self.table.kind,
                "policy": self.policy,
                "ids": ids or None,
                "failure_class": failure_class,
                "since": since,
                "requested_by": requested_by,
                "reason": reason,
                "filters": json.dumps(filters),
            },
        ).fetchone()
        assert row is not None
        return {"replay_id": row["replay_id"], "ids": list(row["operation_keys"])}
