"""Database connections and the two commit disciplines this package uses.

Connections are in autocommit mode; every unit of work is an explicit
``with conn.transaction():`` block (usually through :func:`bounded`), so
transactions stay short and visible in the code. Rows come back as dicts.

Durability, stated once here:

- **Evidence is committed synchronously**: window lifecycle records, run
  summaries, replays, hint receipts, migrations. That is the default.
- **Idempotent work may commit asynchronously** (``synchronous_commit = off``):
  a row-delete batch, and the leased-queue writes of a worker (claims, tokens,
  outcomes). A crash can undo the last fraction of a second of them, and each
  is re-driven with the same key range or the same idempotency key. The next
  synchronous commit on the server makes every earlier one durable.
  Row batches use ``bounded(..., synchronous_commit=False)`` (``SET LOCAL``);
  a worker's session uses :func:`relaxed_durability`, which resets the setting
  on exit, so the write that closes a window afterwards is synchronous again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

if TYPE_CHECKING:
    from retention.policy.model import Timeouts

Connection = psycopg.Connection[dict[str, Any]]
APPLICATION_NAME = "retention"  # health_check.sql tells retention's sessions by it


def configure(raw: psycopg.Connection[Any]) -> Connection:
    """Put a fresh psycopg 3 connection into the mode this package expects.

    The session's TimeZone is UTC and its DateStyle ISO whatever the server or
    database default is: a column without a time zone is only ever compared
    inside :func:`bounded`, which sets the policy's ``timestamp_timezone`` for
    that transaction, and dates print as values that read back the same.  Its
    ``application_name`` is ``retention``, which is how the health check
    (:mod:`retention.db.health`) knows which sessions are ours.
    """
    raw.autocommit = True
    raw.prepare_threshold = None  # custom plans: key-range bounds change every batch
    raw.row_factory = dict_row  # type: ignore[assignment]
    # how the health check tells our sessions (and the locks they hold) from others';
    # first, so that the session is unnamed for as short a time as possible
    raw.execute("SELECT set_config('application_name', %s, false)", (APPLICATION_NAME,))
    raw.execute("SET TimeZone TO 'UTC'")
    # dates print and read back as the same values whatever the database's default
    # (psycopg reads timestamptz text only in ISO; bounds: retention.rows.partitions)
    raw.execute(
        "SELECT set_config('DateStyle', 'ISO, YMD', false),"
        " set_config('IntervalStyle', 'postgres', false)"
    )
    return raw  # type: ignore[return-value]


# a statement read while a person waits (a page of the view, an API lookup, explain):
# enough for index reads, short for a person
PAGE_STATEMENT_MS = 5000


def connect_dsn(dsn: str) -> Connection:
    """Open a connection from a libpq DSN (the CLI with ``--dsn``, scripts and tests)."""
    return configure(psycopg.connect(dsn, application_name=APPLICATION_NAME))


def set_local(
    conn: Connection,
    *,
    statement_ms: int,
    lock_ms: int,
    synchronous_commit: bool = True,
    timezone: str = "UTC",
) -> None:
    """Bound the current transaction (``SET LOCAL``: it lasts until commit)."""
    conn.execute(
        "SELECT set_config('statement_timeout', %s, true),"
        " set_config('lock_timeout', %s, true),"
        " set_config('synchronous_commit', %s, true),"
        " set_config('TimeZone', %s, true)",
        (f"{statement_ms}ms", f"{lock_ms}ms", "on" if synchronous_commit else "off", timezone),
    )


@contextmanager
def bounded(
    conn: Connection,
    timeouts: Timeouts,
    *,
    reads: bool = False,
    synchronous_commit: bool = True,
    timezone: str = "UTC",
) -> Iterator[None]:
    """One transaction bounded by the policy's timeouts.

    ``reads=True`` uses ``plan_statement_ms`` (planning and counting statements
    that may read many rows); otherwise ``statement_ms``. ``timezone`` is the
    zone a timestamp column without a time zone is read in: comparing it with
    the cutoff (a ``timestamptz``) converts it in the session's TimeZone.
    """
    with conn.transaction():
        set_local(
            conn,
            statement_ms=timeouts.plan_statement_ms if reads else timeouts.statement_ms,
            lock_ms=timeouts.lock_ms,
            synchronous_commit=synchronous_commit,
            timezone=timezone,
        )
        yield


@contextmanager
def relaxed_durability(conn: Connection) -> Iterator[None]:
    """Commit asynchronously for the length of the block, then reset (see module docs)."""
    conn.execute("SET synchronous_commit = off")
    try:
        yield
    finally:
        if not conn.closed and not conn.broken:
            conn.execute("RESET synchronous_commit")
