"""Dead letters: list them, and move chosen ones back to pending with an audit record.

Both job kinds replay through the leased queue's one replay statement
(``queue_replay.sql``), which moves the jobs and writes the audit row of
``retention.replays`` in one transaction.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.queue.leased import EVENTS, OPERATIONS, LeasedQueue, QueueTable


class ReplayError(ValueError):
    """A replay request that would be too broad or names nothing."""


def dead_operations(
    conn: Connection,
    *,
    policy: str | None = None,
    failure_class: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    return conn.execute(
        query("dead_letter_operations"),
        {"policy": policy, "failure_class": failure_class, "limit": limit},
    ).fetchall()


def replay_dead(
    conn: Connection,
    *,
    policy: str,
    operation_keys: list[str] | None = None,
    failure_class: str | None = None,
    since: dt.datetime | None = None,
    requested_by: str,
    reason: str | None = None,
) -> dict[str, Any]:
    """Move matching dead operations of ``policy`` back to pending; returns the audit row."""
    if not operation_keys and not failure_class:
        raise ReplayError(
            "name the operations to replay: give operation keys or a failure class "
            "(optionally with 'since'); replaying every dead operation at once is refused"
        )
    asked = {"operation_keys": operation_keys, "failure_class": failure_class}
    moved = _replay(
        OPERATIONS, conn, policy, operation_keys, failure_class, since, requested_by, reason, asked
    )
    return {"replay_id": moved["replay_id"], "operation_keys": moved["ids"]}


def replay_dead_events(
    conn: Connection,
    *,
    policy: str,
    event_ids: list[str] | None,
    since: dt.datetime | None,
    requested_by: str,
    reason: str | None,
) -> dict[str, Any]:
    """Move exhausted (dead) events back to pending, attempts reset, with an audit row."""
    if not event_ids and since is None:
        raise ReplayError("name the events to replay: give event ids or 'since'")
    moved = _replay(
        EVENTS, conn, policy, event_ids, None, since, requested_by, reason, {"event_ids": event_ids}
    )
    return {"replay_id": moved["replay_id"], "event_ids": moved["ids"]}


def _replay(
    table: QueueTable,
    conn: Connection,
    policy: str,
    ids: list[str] | None,
    failure_class: str | None,
    since: dt.datetime | None,
    requested_by: str,
    reason: str | None,
    asked: dict[str, Any],
) -> dict[str, Any]:
    """One replay statement; the audit row keeps the filters as the caller named them."""
    return LeasedQueue(table, policy, lease_seconds=0).replay(
        conn,
        ids=ids,
        failure_class=failure_class,
        since=since,
        requested_by=requested_by,
        reason=reason,
        filters={**asked, "since": since.isoformat() if since else None},
    )
