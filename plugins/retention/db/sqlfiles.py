"""Load the SQL in ``include/sql`` and bind validated identifiers into it.

Values are always bound parameters (``%(name)s``); identifiers (table and
column names) are filled into ``{placeholders}`` with :mod:`psycopg.sql`, so
no string formatting ever builds SQL.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from psycopg import sql

from retention.paths import SQL_DIR


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
