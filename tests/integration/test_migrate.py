"""Migrations are an explicit step that concurrent DAGs can run at once."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from retention.db.connection import connect_dsn
from retention.db.migrate import migrate
from retention.db.sqlfiles import migration_files
from tests.support.env import ROOT


@pytest.fixture
def fresh_dsn(test_dsn: str) -> Iterator[str]:
    """A database of its own with no retention schema, dropped afterwards."""
    name = f"retention_mig_{uuid.uuid4().hex[:8]}"
    with connect_dsn(test_dsn) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield make_conninfo(**{**conninfo_to_dict(test_dsn), "dbname": name})
    with connect_dsn(test_dsn) as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def _migrate_after(barrier, dsn: str, results) -> None:  # type: ignore[no-untyped-def]
    barrier.wait(10)
    try:
        with connect_dsn(dsn) as conn:
            results.put(("ok", migrate(conn)))
    except Exception as exc:  # reported to the parent
        results.put(("error", repr(exc)))


def test_two_dags_migrating_at_once_apply_each_migration_once(fresh_dsn: str) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    workers = [
        context.Process(target=_migrate_after, args=(barrier, fresh_dsn, results)) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    outcomes = [results.get(timeout=5) for _ in workers]
    assert all(kind == "ok" for kind, _ in outcomes), outcomes
    applied = sorted(name for _, names in outcomes for name in names)
    assert applied == [path.stem for path in migration_files()], "each applied exactly once"
    assert sorted(len(names) for _, names in outcomes) == [0, len(migration_files())]
    with connect_dsn(fresh_dsn) as conn:
        rows = conn.execute("SELECT version FROM retention.schema_migrations ORDER BY 1")
        assert [r["version"] for r in rows] == applied
        assert migrate(conn) == [], "a third run has nothing to do"


def test_cli_migrate_runs_the_same_migrations(fresh_dsn: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "retention.cli", "--dsn", fresh_dsn, "migrate"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert out.startswith("applied 0001_windows_and_runs")
    again = subprocess.run(
        [sys.executable, "-m", "retention.cli", "--dsn", fresh_dsn, "migrate"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert again.strip() == "retention schema is up to date"
