"""The operation ledger: enqueue, claim, renew, finish and release remote deletions.

Every function is one short transaction that commits before any HTTP call.
Finishing requires the current lease owner, so a worker whose lease expired
(and whose operation someone else reclaimed) cannot overwrite the newer claim.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from dataclasses import dataclass
from typing import Any

from retention.db import Connection, set_timeouts
from retention.policy import Policy
from retention.sqlfiles import query
from retention.target import TargetTable
from retention.windows import Window


def operation_key(policy: str, revision: int, table: str, row_key: int, version: str) -> str:
    """The same key the ledger's SQL derives (``ops_enqueue.sql``)."""
    text = "|".join((policy, str(revision), table, str(row_key), version))
    return hashlib.sha256(text.encode()).hexdigest()


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
        with conn.transaction():
            set_timeouts(
                conn, statement_ms=policy.statement_timeout_ms, lock_ms=policy.lock_timeout_ms
            )
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
    """Claim up to ``n`` due operations (SKIP LOCKED), committing before returning."""
    assert policy.remote is not None
    with conn.transaction():
        rows = conn.execute(
            query("ops_claim"),
            {
                "policy": policy.name,
                "window_key": window_key,
                "n": n,
                "owner": owner,
                "lease_seconds": policy.remote.lease,
            },
        ).fetchall()
    return [Claimed(**row) for row in rows]


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
    """Record the outcome (and, when done, delete the local row) in one transaction.

    Returns False when this worker no longer holds the lease: nothing is written.
    """
    with conn.transaction():
        row = conn.execute(
            query("ops_finish"),
            {
                "operation_key": op.operation_key,
                "owner": owner,
                "state": result.state,
                "attempt_spent": result.attempt_spent,
                "rate_limited": result.rate_limited,
                "auth_failure": result.auth_failure,
                "not_before": result.not_before,
                "status": result.status,
                "outcome": result.outcome,
                "failure_class": result.failure_class,
                "reason": result.reason[:300],
            },
        ).fetchone()
        if row is None:
            return False
        conn.execute(
            query("attempt_insert"),
            {
                "operation_key": op.operation_key,
                "policy": policy.name,
                "owner": owner,
                "started_at": dt.datetime.fromtimestamp(started, dt.UTC),
                "finished_at": dt.datetime.fromtimestamp(finished, dt.UTC),
                "status": result.status,
                "outcome": result.outcome,
                "duration_ms": (finished - started) * 1000,
            },
        )
        if result.state == "done":
            conn.execute(
                TargetTable.of(policy).query("row_delete_confirmed"),
                {"row_key": row["row_key"], "version": row["version"]},
            )
    return True


def next_due(conn: Connection, window_key: str) -> tuple[dt.datetime | None, int]:
    """When the window's next unfinished operation is due, and how many remain."""
    row = conn.execute(query("ops_window_next_due"), {"window_key": window_key}).fetchone()
    if row is None:
        return None, 0
    return row["next_due"], int(row["pending"])


def seconds_until(moment: dt.datetime) -> float:
    return max(0.0, (moment - dt.datetime.now(dt.UTC)).total_seconds())


def monotonic_deadline(budget_seconds: float) -> float:
    return time.monotonic() + budget_seconds
