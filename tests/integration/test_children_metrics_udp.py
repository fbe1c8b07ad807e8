"""A batch with children counts the rows it deleted of each table over real UDP: one
``rows_deleted`` value per table, tagged with the table, from the row deleter's batches
and from a remote finish. Airflow's own StatsD client, with InfluxDB-style tags (what
``[metrics] statsd_influxdb_enabled`` builds), sends to a socket on loopback; every figure
is checked against what the database lost."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import sql

from devtools.plans import request
from retention import metrics
from retention.db.connection import Connection
from retention.rows.deleter import delete_window
from retention.rows.planner import plan_windows
from tests.support.children import PARENTS, create_family, family_children
from tests.support.policies import make_policy, remote_policy
from tests.support.remote import enqueue_all, work
from tests.support.statsd import StatsdReceiver, airflow_statsd_installed
from tests.support.tables import media_with_renditions


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsdReceiver]:
    """Airflow's StatsD logger with InfluxDB tags, sending to a socket on loopback,
    installed as retention's sink for the test."""
    monkeypatch.delenv(metrics.NAMES_VARIABLE, raising=False)
    with airflow_statsd_installed(influxdb_tags=True) as receiver:
        yield receiver


def rows_deleted(statsd: StatsdReceiver, policy: str, table: str) -> list[float]:
    """The ``rows_deleted`` values that arrived tagged with the policy and ``table``."""
    tag = metrics.segment(table)
    return statsd.values(f"retention.rows_deleted,policy={policy},table={tag}", "c")


def table_count(db: Connection, table: str) -> int:
    statement = sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier(*table.split(".")))
    row = db.execute(statement).fetchone()
    assert row is not None
    return int(row["n"])


def test_each_row_batch_sends_rows_deleted_per_table_with_its_children(
    db: Connection, unique_name: str, statsd: StatsdReceiver
) -> None:
    create_family(db, unique_name)  # the policy's table, then three levels of children
    tables = [f"public.{unique_name}", *(f"public.{unique_name}_{s}" for s in "rcp")]
    before = {table: table_count(db, table) for table in tables}
    policy = make_policy(
        unique_name, window_rows=1000, batch_rows=7, children=family_children(unique_name)
    )
    batches = 0
    for window in plan_windows(db, request(policy)):
        batches += delete_window(db, policy, window, batch_rows=7, dry_run=False).batches
    assert batches >= 4, "several batches, each sending its own figures"
    statsd.wait_for(f"retention.{unique_name}.batch_ms.rows")
    deleted = {table: before[table] - table_count(db, table) for table in tables}
    old = PARENTS // 2
    assert list(deleted.values()) == [old, old * 2, old * 4, old * 8]
    for table in tables:
        sent = rows_deleted(statsd, unique_name, table)
        assert len(sent) == batches, f"{table}: one value per batch"
        assert sum(sent) == deleted[table], table
    assert len(statsd.values(f"retention.{unique_name}.batch_ms.rows", "ms")) == batches
    per_policy = statsd.values(f"retention.{unique_name}.rows_deleted", "c")
    assert sum(per_policy) == sum(deleted.values()), "the per-policy name sums the tables"


def test_a_remote_finish_sends_rows_deleted_per_table_with_its_children(
    db: Connection, unique_name: str, sandbox: Any, test_dsn: str, statsd: StatsdReceiver
) -> None:
    renditions = media_with_renditions(db, unique_name, 3)
    chunks = f"{unique_name}_k"
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigserial PRIMARY KEY, rendition_id bigint NOT NULL "
            "REFERENCES {} (id))"
        ).format(sql.Identifier("public", chunks), sql.Identifier("public", renditions))
    )
    db.execute(
        sql.SQL(
            "INSERT INTO {} (rendition_id) SELECT r.id FROM {} AS r, generate_series(1, 2)"
        ).format(sql.Identifier("public", chunks), sql.Identifier("public", renditions))
    )
    policy = remote_policy(
        unique_name,
        children=[
            {
                "table": renditions,
                "foreign_key": "asset_id",
                "children": [{"table": chunks, "foreign_key": "rendition_id"}],
            }
        ],
    )
    enqueue_all(db, policy)
    stats = work(test_dsn, policy, sandbox)
    statsd.wait_for(f"retention.{unique_name}.batch_ms.operations")
    expected = {
        f"public.{unique_name}": 3,
        f"public.{renditions}": 6,
        f"public.{chunks}": 12,
    }
    assert {table: table_count(db, table) for table in expected} == dict.fromkeys(expected, 0)
    assert dict(stats.rows_by_table) == expected
    for table, rows in expected.items():
        assert sum(rows_deleted(statsd, unique_name, table)) == rows, table
    per_policy = statsd.values(f"retention.{unique_name}.rows_deleted", "c")
    assert sum(per_policy) == sum(expected.values()), "the per-policy name sums the tables"
