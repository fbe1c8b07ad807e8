"""Who held the locks a statement could not get: the PIDs a lock warning names.

``pg_blocking_pids(pid)`` names the sessions holding up a statement that is
waiting *now*. A batch of ours that hit ``lock_timeout`` is no longer waiting:
Postgres cancelled it and rolled it back, so asking then answers nothing, and
asking while it waits would need a second connection and a thread per
deleter. What the locker leaves behind is enough, and cheaper: a row locked by
``SELECT … FOR UPDATE``, ``UPDATE`` or ``DELETE`` carries the locking
transaction's id in ``xmax``, and ``pg_locks`` maps a transaction id that is
still running to its PID (``lock_row_holders.sql``: at most one batch of keys
read through the key index). A session holding a table lock that blocks
``DELETE`` (``LOCK TABLE``, ``ALTER TABLE``) is found in ``pg_locks`` alone
(``lock_blockers.sql``). When neither names anyone (the row was shared by
several lockers, whose ids sit in a multixact, or the lock is already gone),
the sessions holding write locks on the table are named as possible holders.

The partition path asks the same catalog question with the modes its DDL
waits for (:func:`table_lock_holders`). A lookup runs only after a lock
timeout, which already cost ``lock_ms``; it never fails the work: a lookup
that cannot be made says so in the message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.policy.model import TableSpec
from retention.progress import duration
from retention.rows.target import TargetTable, TenantScope
from retention.rows.windows import Window

log = logging.getLogger(__name__)

LOOKUP_TIMEOUT_MS = 2_000
MAX_NAMED = 3  # sessions named in one warning
# Table lock modes that block a DELETE (its ROW EXCLUSIVE) outright: LOCK TABLE, ALTER
# TABLE, CREATE INDEX without CONCURRENTLY, VACUUM FULL, TRUNCATE.
DELETE_CONFLICTS = ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")
# Every mode: what ACCESS EXCLUSIVE (a plain DETACH PARTITION, a DROP TABLE) waits for.
ALL_MODES = (
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    *DELETE_CONFLICTS,
)
# What SHARE UPDATE EXCLUSIVE (DETACH PARTITION CONCURRENTLY) waits for.
SHARE_UPDATE_EXCLUSIVE_CONFLICTS = ("ShareUpdateExclusiveLock", *DELETE_CONFLICTS)


@dataclass(frozen=True)
class LockHolder:
    """One session holding a lock the batch needed (or, if ``certain`` is False, may have)."""

    pid: int
    application_name: str
    state: str | None
    xact_seconds: float | None
    query: str | None
    holds: str  # "rows 25–25 (1 row)", "table lock AccessExclusiveLock"
    certain: bool = True

    def describe(self) -> str:
        """``pid 4242 (psql, idle in transaction for 12 s, holds rows 25–25: SELECT …)``."""
        who = [self.application_name or "no application_name"]
        if self.state:
            age = f" for {duration(self.xact_seconds)}" if self.xact_seconds is not None else ""
            who.append(f"{self.state}{age}")
        who.append(f"holds {self.holds}")
        statement = " ".join((self.query or "").split())
        text = f"pid {self.pid} ({', '.join(who)}"
        return text + (f": {statement[:100]})" if statement else ")")


MAX_KEYS_READ = 1_000
"""The most keys one lookup reads: a stuck batch's first keys are where its lock is."""


def lock_holders(
    conn: Connection, table: TableSpec, window: Window, after: int, batch_rows: int
) -> list[LockHolder]:
    """The sessions holding the locks on the next ``batch_rows`` keys of ``window`` after
    ``after``, or on the table itself (see the module docs); [] when none is found."""
    return key_range_lock_holders(
        conn,
        table,
        window.tenant_scope,
        window.tenant,
        after,
        window.last_id,
        batch_rows,
        cutoff=window.cutoff,
    )


def key_range_lock_holders(
    conn: Connection,
    table: TableSpec,
    scope: TenantScope,
    tenant: Any,
    after: int,
    last_id: int,
    batch_rows: int,
    cutoff: Any = None,
) -> list[LockHolder]:
    """:func:`lock_holders` for the first ``batch_rows`` keys in (after, last_id] of a scope
    (at most ``MAX_KEYS_READ``), only rows older than ``cutoff`` when given: a lock on
    a newer row never blocks the delete, so its holder is never named."""
    target = TargetTable.of(table)
    holders: list[LockHolder] = []
    params = {
        "after": after,
        "last_id": last_id,
        "batch_rows": min(batch_rows, MAX_KEYS_READ),
        "tenant": tenant,
        "cutoff": cutoff,
    }
    try:
        with conn.transaction():
            conn.execute(
                "SELECT set_config('statement_timeout', %s, true),"
                " set_config('lock_timeout', %s, true)",
                (f"{LOOKUP_TIMEOUT_MS}ms", f"{LOOKUP_TIMEOUT_MS // 4}ms"),
            )
            rows = conn.execute(target.query("lock_row_holders", scope), params)
            holders += [_holder(r, _rows_held(r)) for r in rows.fetchall()]
    except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable):
        pass  # the table itself is locked: the catalog lookup below names who holds it
    on_table = table_lock_rows(conn, [(table.schema, table.name)], DELETE_CONFLICTS)
    named = {h.pid for h in holders}
    holders += [
        _table_holder(row) for row in on_table if row["conflicts"] and row["pid"] not in named
    ]
    if not holders:  # maybe row locks we could not trace (a multixact): sessions that write
        holders = [
            _table_holder(row, certain=False)
            for row in on_table
            if {"RowShareLock", "RowExclusiveLock"} & set(row["modes"])
        ]
    return holders


def table_lock_holders(
    conn: Connection, tables: list[tuple[str, str]], conflicting: tuple[str, ...]
) -> str:
    """Who holds a lock in one of the ``conflicting`` modes on one of ``tables`` (schema,
    name), described for an error message; never raises on a failed lookup."""
    try:
        rows = table_lock_rows(conn, tables, conflicting)
    except psycopg.Error as failed:
        if conn.broken:
            raise
        return f"could not look up who holds it ({type(failed).__name__})"
    return describe_holders([_table_holder(row) for row in rows if row["conflicts"]])


def table_lock_rows(
    conn: Connection, tables: list[tuple[str, str]], conflicting: tuple[str, ...]
) -> list[dict[str, Any]]:
    """``lock_blockers.sql``: other sessions holding locks on ``tables`` (catalog only)."""
    return conn.execute(
        query("lock_blockers"),
        {
            "schemas": [schema for schema, _ in tables],
            "tables": [name for _, name in tables],
            "conflicting": list(conflicting),
        },
    ).fetchall()


def describe_holders(holders: list[LockHolder]) -> str:
    """What a lock warning says about who holds the locks."""
    if not holders:
        return "no session holds them any more (the lock was released, or the lookup missed it)"
    sure = [h for h in holders if h.certain]
    shown = "; ".join(h.describe() for h in holders[:MAX_NAMED])
    more = f"; and {len(holders) - MAX_NAMED} more" if len(holders) > MAX_NAMED else ""
    verb = "held by" if sure else "no row lock traced; sessions with write locks on the table:"
    return f"{verb} {shown}{more}"


def find_lock_holders(
    conn: Connection, table: TableSpec, window: Window, after: int, batch_rows: int
) -> str:
    """:func:`lock_holders` described for a warning; never raises on a failed lookup."""
    return _described(lambda: lock_holders(conn, table, window, after, batch_rows), conn)


def row_lock_holders(conn: Connection, table: TableSpec, key: int) -> str:
    """Who holds the lock on one row (or its table), described; never raises on a failed
    lookup. For a remote operation whose local delete hit ``lock_timeout``."""
    return _described(
        lambda: key_range_lock_holders(conn, table, "all", None, key - 1, key, 1), conn
    )


def _described(lookup: Callable[[], list[LockHolder]], conn: Connection) -> str:
    try:
        return describe_holders(lookup())
    except psycopg.Error as failed:
        if conn.broken:
            raise
        log.debug("lock holder lookup failed", exc_info=True)
        return f"could not look up who holds them ({type(failed).__name__})"


def _rows_held(row: dict[str, Any]) -> str:
    first, last, count = row["first_key"], row["last_key"], int(row["rows_locked"])
    keys = f"key {first}" if first == last else f"keys {first}–{last}"
    return f"{count} row lock{'s' if count != 1 else ''} ({keys})"


def _table_holder(row: dict[str, Any], *, certain: bool = True) -> LockHolder:
    modes = ", ".join(sorted(row["modes"]))
    holds = f"table lock {modes}" if certain else f"table lock {modes}, maybe row locks"
    return _holder(row, holds, certain=certain)


def _holder(row: dict[str, Any], holds: str, *, certain: bool = True) -> LockHolder:
    seconds = row.get("xact_seconds")
    return LockHolder(
        pid=int(row["pid"]),
        application_name=row.get("application_name") or "",
        state=row.get("state"),
        xact_seconds=None if seconds is None else float(seconds),
        query=row.get("query"),
        holds=holds,
        certain=certain,
    )
