"""``include/sql/schema.sql`` is the schema every migration leaves: a fresh database,
migrated and read through the catalog, renders the file exactly, so a migration that
changes the schema (or only adds a file) comes with a regenerated snapshot."""

from __future__ import annotations

import difflib
from collections.abc import Callable

import pytest

from retention.db.connection import connect_dsn
from retention.db.migrate import migrate
from retention.db.schema_snapshot import (
    REGENERATE,
    SNAPSHOT_PATH,
    render_schema,
    server_major,
    written_major,
)
from retention.db.sqlfiles import migration_files


def test_the_schema_snapshot_is_what_the_migrations_make(
    fresh_database: Callable[..., str],
) -> None:
    with connect_dsn(fresh_database()) as conn:
        assert migrate(conn) == [path.stem for path in migration_files()]
        rendered = render_schema(conn)
        major = server_major(conn)
    written = SNAPSHOT_PATH.read_text()
    if written_major(written) != major:
        pytest.skip(
            f"include/sql/schema.sql was rendered on PostgreSQL {written_major(written)}, this "
            f"server is {major}: view and function definitions print differently; compare on "
            f"PostgreSQL {written_major(written)} (CI's), or run `{REGENERATE}` when upgrading"
        )
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


def test_the_snapshot_leaves_out_no_kind_of_object_the_migrations_make(
    fresh_database: Callable[..., str],
) -> None:
    """The renderer writes tables, views and functions (with their columns, constraints and
    indexes). A migration that adds a type, a domain, a trigger or a sequence of its own
    would regenerate a snapshot that passes the test above yet leaves that object out:
    until the renderer learns the kind, this test says so."""
    with connect_dsn(fresh_database()) as conn:
        migrate(conn)
        unrendered = conn.execute(
            """
            SELECT 'type ' || t.typname AS what FROM pg_type AS t
            JOIN pg_namespace AS n ON n.oid = t.typnamespace
            WHERE n.nspname = 'retention' AND t.typtype IN ('e', 'd', 'r', 'm')
               OR n.nspname = 'retention' AND t.typtype = 'c' AND NOT EXISTS (
                   SELECT 1 FROM pg_class AS c WHERE c.oid = t.typrelid AND c.relkind <> 'c')
            UNION ALL
            SELECT 'trigger ' || tg.tgname FROM pg_trigger AS tg
            JOIN pg_class AS c ON c.oid = tg.tgrelid
            JOIN pg_namespace AS n ON n.oid = c.relnamespace
            WHERE n.nspname = 'retention' AND NOT tg.tgisinternal
            UNION ALL
            SELECT 'sequence ' || c.relname FROM pg_class AS c
            JOIN pg_namespace AS n ON n.oid = c.relnamespace
            WHERE n.nspname = 'retention' AND c.relkind = 'S' AND NOT EXISTS (
                SELECT 1 FROM pg_depend AS d
                WHERE d.objid = c.oid AND d.deptype IN ('a', 'i'))
            """
        ).fetchall()
    assert [row["what"] for row in unrendered] == [], (
        "the schema snapshot does not render these yet: teach "
        "plugins/retention/db/schema_snapshot.py their kind, then run `make schema`"
    )
