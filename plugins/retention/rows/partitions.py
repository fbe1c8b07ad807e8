"""The partition fast path: expired partitions are detached (and dropped), not deleted row by row.

When a row policy's table is range-partitioned on its timestamp column alone
(declarative partitioning), a partition whose upper bound is at or before the
cutoff holds only rows older than the cutoff, so it can go whole.  Each one is
detached (``DETACH PARTITION … CONCURRENTLY`` when the server allows it, that
is when the table has no default partition; else a plain detach bounded by
``lock_timeout``) and then dropped, or kept as a table of its own with
``partitions: detach_only``.  The default partition and partitions that
straddle the cutoff are left to the windows, as is any table that is not
partitioned that way.  Remote policies never take this path: each of their
rows names an object that needs its own API call.

The evidence (``retention.partition_drops``) is written before the DDL and
completed after it, so an interrupted drop still leaves its trace; a detach
left pending by an interrupted ``CONCURRENTLY`` is finished (``FINALIZE``) by
the next attempt.  A lock held on the parent makes the detach fail at
``lock_timeout`` with nothing changed.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query
from retention.policy.model import Policy, TableSpec
from retention.rows.locks import ALL_MODES, SHARE_UPDATE_EXCLUSIVE_CONFLICTS, table_lock_holders

log = logging.getLogger(__name__)

TS_TYPES = {
    "timestamp with time zone": "timestamptz",
    "timestamp without time zone": "timestamp",
    "date": "date",
}


class PartitionDropError(RuntimeError):
    """A partition could not be detached or dropped; the message says what is left."""


@dataclass(frozen=True)
class ExpiredPartition:
    """A partition whose every row is older than the cutoff."""

    schema: str
    name: str
    bounds: str
    estimated_rows: int
    detach_pending: bool

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "partition": self.qualified,
            "bounds": self.bounds,
            "estimated_rows": self.estimated_rows,
        }


@dataclass(frozen=True)
class Layout:
    """Whether the fast path applies to a table, and if not, why."""

    applies: bool
    has_default: bool = False
    why_not: str | None = None


def partition_layout(conn: Connection, table: TableSpec) -> Layout:
    """Range-partitioned on the timestamp column alone, or why the fast path does not apply."""
    row = conn.execute(
        query("partition_layout"), {"schema": table.schema, "table": table.name}
    ).fetchone()
    if row is None:
        return Layout(False, why_not="not partitioned")
    if row["strategy"] != "r" or list(row["key_columns"]) != [table.timestamp_column]:
        return Layout(
            False,
            why_not=f"partitioned by {row['key_columns']} (strategy {row['strategy']!r}), "
            f"not by range of {table.timestamp_column} alone",
        )
    return Layout(True, has_default=bool(row["has_default"]))


def expired_partitions(
    conn: Connection, policy: Policy, cutoff: dt.datetime, column_type: str
) -> list[ExpiredPartition]:
    """The partitions whose upper bound is at or before the cutoff (catalog reads only)."""
    table = policy.table_spec
    statement = query("partition_expired", ts_type=sql.SQL(TS_TYPES[column_type]))
    with bounded(conn, policy.timeouts, reads=True, timezone=policy.timestamp_timezone):
        rows = conn.execute(
            statement, {"schema": table.schema, "table": table.name, "cutoff": cutoff}
        ).fetchall()
    return [
        ExpiredPartition(
            r["schema_name"],
            r["partition_name"],
            r["bounds"],
            int(r["estimated_rows"]),
            bool(r["detach_pending"]),
        )
        for r in rows
    ]


def drop_partition(
    conn: Connection,
    policy: Policy,
    run_id: str,
    partition: ExpiredPartition,
    *,
    concurrently: bool,
    keep: bool,
) -> None:
    """Detach one expired partition (and drop it unless ``keep``), recording each step."""
    parent = sql.Identifier(policy.table_spec.schema, policy.table_spec.name)
    child = sql.Identifier(partition.schema, partition.name)
    record = {
        "policy": policy.name,
        "run_id": run_id,
        "partition_name": partition.qualified,
        "bounds": partition.bounds,
        "estimated_rows": partition.estimated_rows,
        "action": "detach" if keep else "drop",
    }
    conn.execute(query("partition_drop_record"), {**record, "state": "started"})
    lock_ms = policy.timeouts.lock_ms
    try:
        if partition.detach_pending:  # an earlier CONCURRENTLY was interrupted: finish it
            _outside_transaction(
                conn,
                sql.SQL("ALTER TABLE {} DETACH PARTITION {} FINALIZE").format(parent, child),
                lock_ms,
            )
        elif concurrently:
            _outside_transaction(
                conn,
                sql.SQL("ALTER TABLE {} DETACH PARTITION {} CONCURRENTLY").format(parent, child),
                lock_ms,
            )
        else:
            _in_transaction(
                conn, sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(parent, child), lock_ms
            )
    except psycopg.errors.LockNotAvailable as locked:
        conflicting = (
            SHARE_UPDATE_EXCLUSIVE_CONFLICTS
            if concurrently or partition.detach_pending
            else ALL_MODES
        )
        holders = table_lock_holders(conn, _parent_and_child(policy, partition), conflicting)
        raise PartitionDropError(
            f"policy {policy.name!r}: could not detach {partition.qualified} within "
            f"lock_timeout ({lock_ms} ms): another session holds a lock on {policy.table} "
            f"({holders}). Nothing was detached; a retry tries again."
        ) from locked
    conn.execute(query("partition_drop_record"), {**record, "state": "detached"})
    log.info(
        "policy %s: detached %s, ~%s rows (%s)",
        policy.name,
        partition.qualified,
        f"{partition.estimated_rows:,}",
        partition.bounds,
    )
    if keep:
        return
    try:
        _in_transaction(conn, sql.SQL("DROP TABLE {}").format(child), lock_ms)
    except psycopg.errors.LockNotAvailable as locked:
        holders = table_lock_holders(conn, [(partition.schema, partition.name)], ALL_MODES)
        raise PartitionDropError(
            f"policy {policy.name!r}: {partition.qualified} is detached but could not be "
            f"dropped within lock_timeout ({lock_ms} ms) ({holders}); it holds only rows "
            "older than the cutoff. Drop it by hand, or let a retry drop it."
        ) from locked
    conn.execute(query("partition_drop_record"), {**record, "state": "dropped"})
    log.info("policy %s: dropped %s", policy.name, partition.qualified)


def _parent_and_child(policy: Policy, partition: ExpiredPartition) -> list[tuple[str, str]]:
    return [
        (policy.table_spec.schema, policy.table_spec.name),
        (partition.schema, partition.name),
    ]


def _in_transaction(conn: Connection, statement: sql.Composable, lock_ms: int) -> None:
    """Run DDL in its own transaction with ``lock_timeout`` set for it."""
    with conn.transaction():
        conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{lock_ms}ms",))
        conn.execute(statement)


def _outside_transaction(conn: Connection, statement: sql.Composable, lock_ms: int) -> None:
    """Run DDL that refuses a transaction block, with the session's lock_timeout set for it."""
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{lock_ms}ms",))
    try:
        conn.execute(statement)
    finally:
        conn.execute("RESET lock_timeout")


def finish_interrupted_drops(conn: Connection, policy: Policy) -> list[str]:
    """Drop partitions an earlier attempt detached but did not drop (they are no longer
    children of the table, so only the evidence table remembers them)."""
    finished = []
    for row in conn.execute(query("partition_drops_unfinished"), {"policy": policy.name}):
        schema, name = row["partition_name"].split(".", 1)
        drop = sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name))
        _in_transaction(conn, drop, policy.timeouts.lock_ms)
        conn.execute(
            query("partition_drop_record"),
            {"policy": policy.name, **{k: row[k] for k in row}, "state": "dropped"},
        )
        finished.append(row["partition_name"])
        log.info("policy %s: dropped %s, detached by an earlier attempt", policy.name, finished[-1])
    return finished


def drop_expired_partitions(
    conn: Connection,
    policy: Policy,
    run_id: str,
    cutoff: dt.datetime,
    *,
    column_type: str,
    dry_run: bool,
) -> dict[str, Any]:
    """The fast path for one run: what went (or, in a dry run, would go), or why nothing did."""
    if policy.remote is not None:
        return {"skipped": "remote policy: every row's object needs its own call"}
    if policy.partitions == "rows":
        return {"skipped": "partitions: rows (every row goes through the windows)"}
    layout = partition_layout(conn, policy.table_spec)
    if not layout.applies:
        return {"skipped": layout.why_not}
    finished = [] if dry_run else finish_interrupted_drops(conn, policy)
    expired = expired_partitions(conn, policy, cutoff, column_type)
    listed = [p.as_dict() for p in expired]
    if dry_run:
        return {"would_go": listed, "estimated_rows": sum(p.estimated_rows for p in expired)}
    keep = policy.partitions == "detach_only"
    for partition in expired:
        drop_partition(
            conn, policy, run_id, partition, concurrently=not layout.has_default, keep=keep
        )
    return {
        "detached" if keep else "dropped": listed,
        "estimated_rows": sum(p.estimated_rows for p in expired),
        "finished_from_earlier_attempts": finished,
        "concurrently": not layout.has_default,
    }
