"""Database connections: through the Postgres provider hook inside Airflow.

Connections are opened in autocommit mode and every unit of work uses an
explicit ``with conn.transaction():`` block, so transactions stay short and
visible in the code.  Rows come back as dicts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

if TYPE_CHECKING:
    from retention.policy import Policy

Connection = psycopg.Connection[dict[str, Any]]


def connect(conn_id: str) -> Connection:
    """Open a psycopg 3 connection for an Airflow connection id (env or metadata DB)."""
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    raw = PostgresHook(postgres_conn_id=conn_id).get_conn()
    if not isinstance(raw, psycopg.Connection):
        raise RuntimeError(
            "the Postgres provider returned a psycopg2 connection; install psycopg 3 "
            "(psycopg[binary]) and SQLAlchemy 2 as requirements.txt pins"
        )
    raw.autocommit = True
    raw.prepare_threshold = None  # custom plans: key-range bounds change every batch
    raw.row_factory = dict_row  # type: ignore[assignment]
    return raw  # type: ignore[return-value]


def connect_dsn(dsn: str) -> Connection:
    """Open a connection from a libpq DSN (scripts and tests outside Airflow)."""
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row, prepare_threshold=None)


def set_timeouts(
    conn: Connection, *, statement_ms: int, lock_ms: int, synchronous_commit: bool = True
) -> None:
    """Bound the current transaction (like ``SET LOCAL``: it lasts until commit).

    ``synchronous_commit=False`` lets the commit return before its WAL is flushed.
    Only idempotent work may use it: a crash can undo such a commit, and the
    next synchronous commit on the server (every ledger update that closes a
    window does one) makes all earlier ones durable.
    """
    conn.execute(
        "SELECT set_config('statement_timeout', %s, true),"
        " set_config('lock_timeout', %s, true),"
        " set_config('synchronous_commit', %s, true)",
        (f"{statement_ms}ms", f"{lock_ms}ms", "on" if synchronous_commit else "off"),
    )


@contextmanager
def bounded(
    conn: Connection, policy: Policy, *, reads: bool = False, synchronous_commit: bool = True
) -> Iterator[None]:
    """One transaction bounded by the policy's timeouts.

    ``reads=True`` uses ``plan_statement_timeout_ms`` (planning and counting
    statements that may read many rows); otherwise ``statement_timeout_ms``.
    """
    with conn.transaction():
        set_timeouts(
            conn,
            statement_ms=policy.plan_statement_timeout_ms if reads else policy.statement_timeout_ms,
            lock_ms=policy.lock_timeout_ms,
            synchronous_commit=synchronous_commit,
        )
        yield
