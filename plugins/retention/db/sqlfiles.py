"""Load the SQL in ``include/sql`` and bind validated identifiers into it.

Values are always bound parameters (``%(name)s``); identifiers (table and
column names) are filled into ``{placeholders}`` with :mod:`psycopg.sql`, so
no string formatting ever builds SQL.

File names: ``<prefix>_<what>.sql``, one prefix per subject, from
:data:`SQL_PREFIXES` (a unit test holds every file to it). A table of the
``retention`` schema is named in the singular (``window_``, ``run_``,
``run_lease_``, ``partition_drop_``), or by the short name listed
(``ops_`` for operations); a statement about no single ledger table is named
after what it reads (``target_``, ``plan_``, ``partition_``) or who reads it
(``ui_``, ``explain_``, ``purge_``). A new subject adds its prefix here.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from psycopg import sql

from retention.paths import SQL_DIR

# Every prefix of a file name in include/sql, and what the files it starts are about.
SQL_PREFIXES = {
    # a table (or view) of the retention schema
    "alert": "retention.alerts, the alert ledger",
    "attempt": "retention.attempts",
    "dead_letter": "the retention.dead_operations and retention.dead_events views",
    "endpoint": "retention.notify_endpoints",
    "erasure": "retention.erasures, and the rows and operations of an erasure's scope",
    "ops": "retention.operations",
    "outbox": "retention.outbox",
    "partition_drop": "retention.partition_drops",
    "run": "retention.runs",
    "run_lease": "retention.run_leases",
    "window": "retention.windows",
    "hold": "retention.holds, and the held-row predicate every delete statement embeds",
    # what a statement reads when it is no single ledger table
    "target": "the policy's table",
    "plan": "the planner's probes of the policy's table",
    "partition": "the partitions of the policy's table, and the time zone data they need",
    "lock": "the server's locks (pg_locks)",
    "health": "the server's health (pg_stat_activity)",
    "hint": "inbound hints: retention.hint_receipts and the operations a hint enqueues",
    "limiter": "the rate limiter: retention.rate_limiters, take_tokens, throttle_scope",
    "queue": "the leased queue, for any job kind's table",
    # who reads several tables at once
    "explain": "cli explain",
    "ledger": "the audit purge of removed policies, over every ledger table",
    "purge": "the audit purge of old evidence",
    "metrics": "the metrics",
    "ui": "the Retention view",
    # the schema snapshot: its catalog reads, and schema.sql that make schema writes
    "schema": "the retention schema's snapshot (include/sql/schema.sql, never run)",
}


@cache
def sql_text(name: str) -> str:
    """The text of ``include/sql/<name>.sql``."""
    return (SQL_DIR / f"{name}.sql").read_text()


def query(name: str, **identifiers: sql.Composable) -> sql.Composed:
    """``include/sql/<name>.sql`` with its ``{placeholders}`` filled by composables."""
    return sql.SQL(sql_text(name)).format(**identifiers)  # type: ignore[arg-type]


def migration_files() -> list[Path]:
    """Migrations in the order they apply."""
    return sorted((SQL_DIR / "migrations").glob("*.sql"))
