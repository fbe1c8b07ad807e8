"""``include/sql/schema.sql`` is the schema every migration leaves: a fresh database,
migrated and read through the catalog, renders the file exactly, so a migration that
changes the schema (or only adds a file) comes with a regenerated snapshot."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from retention.db.connection import connect_dsn
from retention.db.migrate import migrate
from retention.db.schema_snapshot import REGENERATE, SNAPSHOT_PATH, render_schema
from retention.db.sqlfiles import migration_files


def test_the_schema_snapshot_is_what_the_migrations_make(
    fresh_database: Callable[..., str],
) -> None:
    with connect_dsn(fresh_database()) as conn:
        assert migrate(conn) == [path.stem for path in migration_files()]
        rendered = render_schema(conn)
    written = SNAPSHOT_PATH.read_text()
    diff = "".join(
        difflib.unified_diff(
            written.splitlines(keepends=True),
            rendered.splitlines(keepends=True),
            "include/sql/schema.sql",
            "a freshly migrated database",
            n=1,
        )
    )
    assert rendered == written, f"the schema snapshot is stale: run `{REGENERATE}`\n{diff}"


def test_the_snapshot_names_every_migration_and_table() -> None:
    """A migration that changes no table still changes the snapshot (its list of
    migrations), so the test above fails until `make schema` runs."""
    written = SNAPSHOT_PATH.read_text()
    for path in migration_files():
        assert f"--   {path.stem}\n" in written, f"run `{REGENERATE}`: {path.stem} is missing"
    for table in ("windows", "runs", "run_leases", "operations", "partition_drops", "alerts"):
        assert f"CREATE TABLE retention.{table} (" in written
