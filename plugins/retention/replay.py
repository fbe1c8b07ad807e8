"""Dead letters: list them, and move chosen ones back to pending with an audit record."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from retention.db import Connection
from retention.sqlfiles import query


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
        query("dead_operations"),
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
    filters = {"operation_keys": operation_keys, "failure_class": failure_class}
    row = _replay(conn, "ops_replay", policy, filters, since, requested_by, reason)
    return {"replay_id": row["replay_id"], "operation_keys": list(row["operation_keys"])}


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
    row = _replay(
        conn, "outbox_replay", policy, {"event_ids": event_ids}, since, requested_by, reason
    )
    return {"replay_id": row["replay_id"], "event_ids": list(row["operation_keys"])}


def _replay(
    conn: Connection,
    statement: str,
    policy: str,
    filters: dict[str, Any],
    since: dt.datetime | None,
    requested_by: str,
    reason: str | None,
) -> dict[str, Any]:
    """Run one replay statement (move + audit row, one transaction) and return the audit row."""
    keys = filters.get("operation_keys") or filters.get("event_ids") or None
    audit = {**filters, "since": since.isoformat() if since else None}
    row = conn.execute(
        query(statement),
        {
            "policy": policy,
            "keys": keys,
            "ids": keys,
            "failure_class": filters.get("failure_class"),
            "since": since,
            "requested_by": requested_by,
            "reason": reason,
            "filters": json.dumps(audit),
        },
    ).fetchone()
    assert row is not None
    return row
