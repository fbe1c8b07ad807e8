"""A window's remote deletions into the ledger: one pending operation per eligible row.

The upsert is keyed by the operation key (``retention.objects.keys``), so
enqueueing a window again adds nothing for rows it already holds. A policy with
``remote.derivatives`` gets one more operation per derivative of each object, in
the same transaction as the object's own, so no object is ever half enqueued.
"""

from __future__ import annotations

from typing import Any

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query
from retention.policy.model import Policy, RemoteSpec
from retention.rows.target import TargetTable
from retention.rows.windows import Window


def enqueue_window(conn: Connection, policy: Policy, window: Window, batch_rows: int) -> int:
    """Upsert one pending operation per eligible row of the window, and the derivative
    operations any object operation of the policy still lacks; returns rows inserted."""
    inserted = _enqueue_rows(conn, policy, window, batch_rows)
    if policy.remote is not None and policy.remote.derivatives:
        with bounded(conn, policy.timeouts):
            enqueue_missing_derivatives(conn, policy)
    return inserted


def _enqueue_rows(conn: Connection, policy: Policy, window: Window, batch_rows: int) -> int:
    target = TargetTable.of(policy.table_spec, policy.remote)
    bound = target.query("target_batch_bound", window.tenant_scope)
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
            made = conn.execute(insert, {**params, "upto": row["upto"]})
            inserted += made.rowcount
            if policy.remote is not None and policy.remote.derivatives:
                keys = [r["operation_key"] for r in made.fetchall()]
                enqueue_derivatives(conn, policy.remote, keys)
        if row["keys"] < batch_rows:
            return inserted
        after = row["upto"]


def enqueue_derivatives(conn: Connection, remote: RemoteSpec | None, object_keys: list[str]) -> int:
    """One operation per derivative of each object operation named (no-op without
    derivatives); returns the operations inserted or made due. Runs in the caller's
    transaction, the one that enqueued the objects."""
    if remote is None or not remote.derivatives or not object_keys:
        return 0
    return conn.execute(
        query("ops_enqueue_derivatives"),
        {"keys": object_keys, "resources": [d.name for d in remote.derivatives]},
    ).rowcount


def enqueue_missing_derivatives(conn: Connection, policy: Policy) -> int:
    """The derivative operations that the policy's object operations not yet done lack
    (made before ``remote.derivatives`` named them: ``ops_enqueue.sql`` returns only the
    objects it inserted or made due, so nothing else enqueued theirs). Without them the
    object alone would look like every resource; the finish also refuses a row while a
    named resource has no operation. Returns the operations inserted."""
    remote = policy.remote
    if remote is None or not remote.derivatives:
        return 0
    return conn.execute(
        query("ops_enqueue_missing_derivatives"),
        {"policy": policy.name, "resources": [d.name for d in remote.derivatives]},
    ).rowcount
