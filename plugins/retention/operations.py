"""The operation ledger: enqueue, claim, renew, finish and release remote deletions.

Every function is one short transaction that commits before any HTTP call.
Finishing requires the current lease owner, so a worker whose lease expired
(and whose operation someone else reclaimed) cannot overwrite the newer claim.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import psycopg
from psycopg import sql

from retention.db import Connection, bounded
from retention.policy import Policy
from retention.sqlfiles import query
from retention.target import TargetTable
from retention.windows import Window


def operation_key(policy: str, revision: int, table: str, row_key: int, version: str) -> str:
    """The same key the ledger's SQL derives (``ops_enqueue.sql``)."""
    text = "|".join((policy, str(revision), table, str(row_key), version))
    return hashlib.sha256(text.encode()).hexdigest()


def event_id_for(key: str) -> str:
    """The id of an operation's ``retention.deleted`` event, as ``ops_finish.sql`` derives it."""
    return "evt_" + hashlib.sha256(f"retention.deleted|{key}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Claimed:
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


def enqueue_window(conn: Connection, policy: Policy, window: Window, batch_rows: int) -> int:
    """Upsert one pending operation per eligible row of the window; returns rows inserted."""
    target = TargetTable.of(policy)
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
            "table_name": str(policy.table),
            "window_key": window.window_key,
        }
        with bounded(conn, policy):
            row = conn.execute(bound, params).fetchone()
            if row is None or not row["keys"]:
                return inserted
            inserted += conn.execute(insert, {**params, "upto": row["upto"]}).rowcount
        if row["keys"] < batch_rows:
            return inserted
        after = row["upto"]


def claim(
    conn: Connection,
    policy: Policy,
    owner: str,
    n: int,
    window_key: str | None = None,
) -> list[Claimed]:
    """Claim up to ``n`` due operations (SKIP LOCKED), committing before returning.

    Expired leases are reclaimed first (their owner died or stalled), then
    pending operations whose ``not_before`` has passed, oldest first.
    """
    assert policy.remote is not None
    params = {
        "policy": policy.name,
        "window_key": window_key,
        "owner": owner,
        "lease_seconds": policy.remote.lease,
    }
    rows = claim_due(conn, lambda state: claim_statement(state, window_key is not None), params, n)
    return [Claimed(**row) for row in rows]


def claim_due(
    conn: Connection,
    statement_for: Callable[[str], sql.Composed],
    params: dict[str, Any],
    n: int,
) -> list[dict[str, Any]]:
    """Claim up to ``n`` rows in one short transaction: expired leases first, then due pending.

    Shared by the operation ledger and the event outbox; ``statement_for(state)``
    is the claim statement for rows in that state.
    """
    rows: list[dict[str, Any]] = []
    with conn.transaction():
        for state in ("in_flight", "pending"):
            if len(rows) < n:
                statement = statement_for(state)
                rows += conn.execute(
                    statement, {**params, "state": state, "n": n - len(rows)}, prepare=True
                ).fetchall()
    return rows


@cache
def claim_statement(state: str, one_window: bool) -> sql.Composed:
    """``ops_claim.sql`` for one state, for a policy or one of its windows."""
    return query(
        "ops_claim",
        window_filter=sql.SQL("window_key = %(window_key)s" if one_window else "TRUE"),
        due_column=sql.Identifier("lease_expires_at" if state == "in_flight" else "not_before"),
    )


def renew(conn: Connection, policy: Policy, owner: str, keys: list[str]) -> None:
    assert policy.remote is not None
    conn.execute(
        query("ops_renew"), {"keys": keys, "owner": owner, "lease_seconds": policy.remote.lease}
    )


def release(conn: Connection, owner: str, keys: list[str]) -> None:
    """Hand unstarted operations back as pending, spending no attempt."""
    if keys:
        conn.execute(query("ops_release"), {"keys": keys, "owner": owner})


@dataclass(frozen=True)
class Finish:
    """How to record an attempt: the new state and the counters it moves."""

    state: str
    outcome: str
    status: int | None
    failure_class: str | None = None
    reason: str = ""
    not_before: dt.datetime | None = None
    attempt_spent: int = 1
    rate_limited: int = 0
    auth_failure: bool = False


def finish(
    conn: Connection,
    policy: Policy,
    owner: str,
    op: Claimed,
    result: Finish,
    *,
    started: float,
    finished: float,
) -> bool:
    """Record one attempt; False when this worker no longer holds the lease."""
    return bool(finish_many(conn, policy, owner, [AttemptRecord(op, result, started, finished)]))


def current_versions(conn: Connection, policy: Policy, row_keys: list[int]) -> dict[int, str]:
    """The version each named row has now (rows that are gone are absent)."""
    rows = conn.execute(
        TargetTable.of(policy).query("row_versions"), {"row_keys": row_keys}, prepare=True
    )
    return {row["row_key"]: row["version"] for row in rows}


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt to record: the operation, its ledger change, and when the call ran."""

    op: Claimed
    change: Finish
    started: float
    finished: float


def finish_many(
    conn: Connection, policy: Policy, owner: str, outcomes: list[AttemptRecord]
) -> dict[str, int]:
    """Record attempts (and delete the rows of done operations) in one statement.

    One statement per batch is one transaction and one round trip (see
    ``ops_finish.sql``). If it fails (a row that cannot be deleted: a foreign
    key, a trigger, a lock held past ``lock_timeout``), each outcome is recorded
    on its own, and one whose row cannot be deleted goes dead as
    ``local_delete_failed`` rather than stalling its batch on every run.
    Returns the recorded keys with the local rows each deleted; a key missing
    from it had lost its lease, and nothing was written for it.
    """
    if not outcomes:
        return {}
    try:
        return _finish_statement(conn, policy, owner, outcomes)
    except psycopg.Error:
        if len(outcomes) > 1:
            recorded: dict[str, int] = {}
            for outcome in outcomes:
                recorded.update(finish_many(conn, policy, owner, [outcome]))
            return recorded
        failed = outcomes[0]
        if failed.change.state != "done":
            raise
    dead = Finish(
        "dead",
        failed.change.outcome,
        failed.change.status,
        "local_delete_failed",
        "the API confirmed the deletion but the local row could not be deleted",
    )
    retry = AttemptRecord(failed.op, dead, failed.started, failed.finished)
    return _finish_statement(conn, policy, owner, [retry])


def _finish_statement(
    conn: Connection, policy: Policy, owner: str, outcomes: list[AttemptRecord]
) -> dict[str, int]:
    """One ``ops_finish.sql`` statement in a bounded transaction."""
    utc = dt.UTC
    with bounded(conn, policy, synchronous_commit=False):
        rows = conn.execute(
            finish_statement(policy),
            {
                "owner": owner,
                "policy": policy.name,
                "notify": policy.notify is not None,
                "keys": [o.op.operation_key for o in outcomes],
                "states": [o.change.state for o in outcomes],
                "attempt_spent": [o.change.attempt_spent for o in outcomes],
                "rate_limited": [o.change.rate_limited for o in outcomes],
                "auth_failure": [o.change.auth_failure for o in outcomes],
                "not_before": [o.change.not_before for o in outcomes],
                "status": [o.change.status for o in outcomes],
                "outcome": [o.change.outcome for o in outcomes],
                "failure_class": [o.change.failure_class for o in outcomes],
                "reason": [o.change.reason[:300] for o in outcomes],
                "started_at": [dt.datetime.fromtimestamp(o.started, utc) for o in outcomes],
                "finished_at": [dt.datetime.fromtimestamp(o.finished, utc) for o in outcomes],
                "duration_ms": [(o.finished - o.started) * 1000 for o in outcomes],
            },
            prepare=True,
        ).fetchall()
    return {row["op_key"]: int(row["rows_deleted"]) for row in rows}


@cache
def finish_statement(policy: Policy) -> sql.Composed:
    """``ops_finish.sql`` composed for the policy's table (once per policy)."""
    return TargetTable.of(policy).query("ops_finish")


def next_due(conn: Connection, window_key: str) -> tuple[dt.datetime | None, int]:
    """When the window's next unfinished operation is due, and how many remain."""
    row = conn.execute(query("ops_window_next_due"), {"window_key": window_key}).fetchone()
    if row is None:
        return None, 0
    return row["next_due"], int(row["pending"])
