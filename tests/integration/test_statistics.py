"""After a run that deleted a large share of its table, reconcile analyzes the table (as
pt-archiver's --analyze does), so that the next plan does not estimate from the deleted
rows; ``analyze_after: false`` leaves it to autovacuum."""

from __future__ import annotations

import logging

import pytest
from psycopg import sql

from retention.airflow.steps import reconcile_step
from retention.db.connection import Connection
from retention.policy import Policy
from retention.rows.deleter import delete_window
from tests.support.policies import make_policy
from tests.support.tables import create_table, ids_left, new, old, plan


def statistics(db: Connection, name: str) -> tuple[float, int]:
    """The table's reltuples and how many times it was analyzed by hand."""
    row = db.execute(
        "SELECT c.reltuples::float8 AS reltuples, s.analyze_count "
        "FROM pg_class AS c JOIN pg_stat_user_tables AS s ON s.relid = c.oid "
        "WHERE c.oid = to_regclass(%s)",
        (f"public.{name}",),
    ).fetchone()
    assert row is not None
    return row["reltuples"], row["analyze_count"]


def run(db: Connection, name: str, policy: Policy, old_rows: int, new_rows: int) -> None:
    """A table of old and new rows, analyzed (autovacuum off, so that only reconcile
    analyzes it), and a run of ``policy`` that deletes the old ones and reconciles."""
    rows = [(i, 1, old()) for i in range(1, old_rows + 1)]
    rows += [(i, 1, new()) for i in range(old_rows + 1, old_rows + new_rows + 1)]
    create_table(db, name, rows)
    db.execute(
        sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(
            sql.Identifier("public", name)
        )
    )
    for window in plan(db, policy):
        delete_window(db, policy, window, batch_rows=policy.batch_rows, dry_run=False)
    assert len(ids_left(db, name)) == new_rows
    reconcile_step(policy, run_id="run-1")


def test_a_run_that_deletes_most_of_the_table_analyzes_it(
    db: Connection, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention")
    policy = make_policy(unique_name)
    run(db, unique_name, policy, old_rows=150, new_rows=50)
    reltuples, analyzed = statistics(db, unique_name)
    assert reltuples == 50, "the statistics count the rows left, not the 200 before"
    assert analyzed == 2, "create_table's ANALYZE, then reconcile's"
    (said,) = [r.getMessage() for r in caplog.records if r.name == "retention.rows.statistics"]
    assert said.startswith(
        f"policy {unique_name}: the run deleted 150 rows, more than a tenth of the ~200 its "
        f"statistics count: ran ANALYZE public.{unique_name} in "
    )


def test_analyze_after_false_leaves_the_statistics_to_autovacuum(
    db: Connection, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention")
    policy = make_policy(unique_name, analyze_after=False)
    run(db, unique_name, policy, old_rows=150, new_rows=50)
    assert statistics(db, unique_name) == (200, 1), "only create_table's ANALYZE"
    (said,) = [r.getMessage() for r in caplog.records if r.name == "retention.rows.statistics"]
    assert said.endswith("; not analyzed (analyze_after: false), autovacuum will")


def test_a_small_delete_leaves_the_statistics_alone(db: Connection, unique_name: str) -> None:
    run(db, unique_name, make_policy(unique_name), old_rows=10, new_rows=190)
    assert statistics(db, unique_name) == (200, 1), "a tenth or less: not analyzed"
