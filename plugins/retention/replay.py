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
    filters = {
        "operation_keys": operation_keys or None,
        "failure_class": failure_class,
        "since": since.isoformat() if since else None,
    }
    with conn.transaction():
        row = conn.execute(
            query("ops_replay"),
            {
                "policy": policy,
                "keys": operation_keys or None,
                "failure_class": failure_class,
                "since": since,
                "requested_by": requested_by,
                "reason": reason,
                "filters": json.dumps(filters),
            },
        ).fetchone()
    assert row is not None
    return {"replay_id": row["replay_id"], "operation_keys": list(row["operation_keys"])}
