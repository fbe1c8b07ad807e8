"""Create and upgrade the ``retention`` schema (window ledger, runs, operations, outbox).

An explicit step, never a side effect: the ``migrate_schema`` task runs it
first in every policy DAG, and ``python -m retention.cli migrate`` runs it
from a deploy pipeline. Never at parse time. Each file in
``include/sql/migrations`` applies once, in name order, inside one
transaction that holds a transaction-scoped advisory lock, so DAGs migrating
the same database at once wait for each other and a failed migration leaves
nothing half-applied.
"""

from __future__ import annotations

import logging

import psycopg

from retention.db.connection import Connection
from retention.db.sqlfiles import migration_files

log = logging.getLogger(__name__)

LOCK_KEY = 0x7265746E  # "retn": serialises migrations across concurrent runs


def applied(conn: Connection) -> set[str]:
    """Migrations already applied (none when the schema does not exist yet)."""
    try:
        with conn.transaction():
            rows = conn.execute("SELECT version FROM retention.schema_migrations").fetchall()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        return set()
    return {row["version"] for row in rows}


def migrate(conn: Connection) -> list[str]:
    """Apply pending migrations, all in one transaction; return the names applied now.

    An up-to-date schema is only read, never locked or altered, so a runtime
    role without DDL rights runs every DAG once a deploy step has migrated.
    """
    if {path.stem for path in migration_files()} <= applied(conn):
        return []
    applied_now: list[str] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute("CREATE SCHEMA IF NOT EXISTS retention")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS retention.schema_migrations ("
            " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {
            row["version"]
            for row in conn.execute("SELECT version FROM retention.schema_migrations")
        }
        for path in migration_files():
            if path.stem in done:
                continue
            conn.execute(path.read_text())
            conn.execute(
                "INSERT INTO retention.schema_migrations (version) VALUES (%s)", (path.stem,)
            )
            applied_now.append(path.stem)
    if applied_now:
        log.info("retention schema: applied migrations %s", ", ".join(applied_now))
    return applied_now
