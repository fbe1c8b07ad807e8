"""Create and upgrade the ``retention`` schema (window ledger, runs, ...).

Runs as the first task of every retention DAG, never at parse time.  Each
file in ``include/sql/migrations`` applies once, in name order, inside one
transaction that holds an advisory lock, so concurrent runs are safe and a
failed migration leaves nothing half-applied.
"""

from __future__ import annotations

import logging

from retention.db import Connection
from retention.sqlfiles import migration_files

log = logging.getLogger(__name__)

_LOCK_KEY = 0x7265746E  # "retn": serialises migrations across concurrent runs


def migrate(conn: Connection) -> list[str]:
    """Apply pending migrations; return the names of those applied now."""
    applied_now: list[str] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
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
