"""`make demo-data` gives both demo policies rows to delete again, and a clean ledger."""

from __future__ import annotations

import datetime as dt
import importlib.util
from types import ModuleType

import pytest
from psycopg import sql

from retention.db.connection import Connection
from tests.support.env import ROOT


def demo_data(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``scripts/demo_data.py``, imported as the Makefile runs it (its folder on the path)."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("demo_data", ROOT / "scripts" / "demo_data.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def older_than(db: Connection, table: str, cutoff: dt.datetime) -> tuple[int, int]:
    row = db.execute(
        sql.SQL(
            "SELECT count(*) AS total, count(*) FILTER (WHERE created_at < %s) AS old FROM {}"
        ).format(sql.Identifier("public", table)),
        (cutoff,),
    ).fetchone()
    assert row is not None
    return row["total"], row["old"]


def test_both_tables_are_reseeded_with_the_rows_asked_for_and_old_ones_among_them(
    db: Connection, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    end = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)
    said = demo_data(monkeypatch).reseed(
        db,
        rows=900,
        media_rows=40,
        end=end,
        event_table=f"public.{unique_name}_events",
        media_table=f"public.{unique_name}_media",
        media_policy=unique_name,
    )
    try:
        # 90 days of events: a third is younger than event_logs' 30 days
        assert older_than(db, f"{unique_name}_events", end - dt.timedelta(days=30)) == (900, 600)
        # 28 days of media: half is older than media_assets' 14 days
        assert older_than(db, f"{unique_name}_media", end - dt.timedelta(days=14)) == (40, 20)
        assert f"public.{unique_name}_events (900 rows, 90 days, 20 tenants)" in said
        assert f"earlier {unique_name} operations forgotten" in said
    finally:
        for table in ("events", "media_renditions", "media"):
            db.execute(
                sql.SQL("DROP TABLE IF EXISTS {}").format(
                    sql.Identifier("public", f"{unique_name}_{table}")
                )
            )
