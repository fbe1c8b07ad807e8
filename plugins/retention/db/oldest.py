"""The oldest row of a policy's table still older than a cutoff.

One read of the low end of the timestamp index (nothing after a clean run),
shared by the lag alert (how long that row has waited past its cutoff) and the
``oldest_eligible_age_seconds`` gauge (its age); the Retention view runs the
same SQL inside its own read-only transaction.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from psycopg import sql

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query
from retention.holds.predicate import held_row
from retention.policy.model import Policy


def as_aware(value: dt.datetime | dt.date, timezone: str = "UTC") -> dt.datetime:
    """Timestamps without a time zone (and dates) are read in the policy's timestamp_timezone."""
    if not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    return value if value.tzinfo else value.replace(tzinfo=ZoneInfo(timezone))


def oldest_eligible(conn: Connection, policy: Policy, cutoff: dt.datetime) -> dt.datetime | None:
    """The timestamp of the oldest row older than ``cutoff`` that no legal hold keeps
    (None: there is none): a held row is kept on purpose, it is no lag."""
    table = policy.table_spec
    remote = policy.remote
    statement = query(
        "target_oldest_eligible",
        table=sql.Identifier(table.schema, table.name),
        ts=sql.Identifier(table.timestamp_column),
        held=held_row(
            sql.Identifier(table.key_column),
            table=sql.Identifier(table.schema, table.name),
            tenant=sql.Identifier(table.tenant_column) if table.tenant_column else None,
            object_id=sql.Identifier(remote.object_id_column) if remote else None,
            hold_column=sql.Identifier(table.hold_column) if table.hold_column else None,
        ),
    )
    with bounded(conn, policy.timeouts, reads=True, timezone=policy.timestamp_timezone):
        row = conn.execute(statement, {"cutoff": cutoff, "hold_policy": policy.name}).fetchone()
    if row is None or row["oldest"] is None:
        return None
    return as_aware(row["oldest"], policy.timestamp_timezone)
