"""End to end: whole DAG runs with dag.test() against a seeded table in the real Postgres."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.models.dagbag import DagBag
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
from psycopg import sql

from devtools.seed import seed_event_logs
from retention.db.connection import Connection
from tests.support.env import ROOT
from tests.support.policies import policy_fields
from tests.support.tables import BOUNDARY_KEPT, boundary_rows, create_table, ids_left

pytestmark = pytest.mark.e2e

# Relative to today, so the suite passes on any day (a cutoff in the future is refused).
D = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(
    days=2
)
ROWS = 12_000


def fingerprint(db: Connection, table: str, where: sql.Composable) -> tuple[int, str]:
    """Count and checksum of the rows matching ``where`` (ids, tenants, timestamps, payloads)."""
    row = db.execute(
        sql.SQL(
            "SELECT count(*) AS n, md5(coalesce(string_agg("
            "concat_ws('|', id, tenant_id, created_at, payload), ',' ORDER BY id), '')) AS sum "
            "FROM {} WHERE {}"
        ).format(sql.Identifier("public", table), where)
    ).fetchone()
    assert row is not None
    return row["n"], row["sum"]


def older_than(cutoff: dt.datetime) -> sql.Composable:
    return sql.SQL("created_at < {}").format(sql.Literal(cutoff))


def not_older_than(cutoff: dt.datetime) -> sql.Composable:
    return sql.SQL("created_at >= {}").format(sql.Literal(cutoff))


@pytest.fixture
def run_dag(
    db: Connection, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., dict[str, Any]]:
    """Seed public.<unique_name>, load its DAG from dags/, return a runner for dag.test()."""
    seed_event_logs(db, table=f"public.{unique_name}", rows=ROWS, end=D, days=90, tenants=4)
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        yaml.safe_dump(
            {
                "policies": {
                    unique_name: policy_fields(
                        unique_name, window_rows=1500, batch_rows=400, max_batch_rows=400
                    )
                }
            }
        )
    )
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    dag = bag.dags[f"retention__{unique_name}"]

    def run(logical_date: dt.datetime = D, **conf: Any) -> dict[str, Any]:
        dag_run = dag.test(logical_date=logical_date, run_conf=conf or None)
        summary = db.execute(
            "SELECT * FROM retention.runs WHERE policy = %s AND run_id = %s",
            (unique_name, dag_run.run_id),
        ).fetchone()
        assert summary is not None
        return {"state": dag_run.state, "dag_run": dag_run, **summary}

    return run


def test_run_deletes_exactly_the_old_rows_and_a_rerun_deletes_none(
    run_dag: Callable[..., dict[str, Any]], db: Connection, unique_name: str
) -> None:
    cutoff = D - dt.timedelta(days=30)
    old_count, _ = fingerprint(db, unique_name, older_than(cutoff))
    kept_before = fingerprint(db, unique_name, not_older_than(cutoff))
    assert old_count == ROWS * 60 // 90

    first = run_dag()
    assert first["state"] == "success"
    assert first["cutoff"] == cutoff
    assert (first["status"], first["rows_deleted"], first["rows_remaining"]) == (
        "clean",
        old_count,
        0,
    )
    assert first["windows"] == 6, "8000 eligible rows (an estimate) at 1500 per window"
    assert fingerprint(db, unique_name, older_than(cutoff))[0] == 0
    assert fingerprint(db, unique_name, sql.SQL("TRUE")) == kept_before
    longest = db.execute(
        "SELECT max(longest_batch_ms) AS ms, sum(batches) AS batches FROM retention.windows "
        "WHERE policy = %s AND run_id = %s",
        (unique_name, first["dag_run"].run_id),
    ).fetchone()
    assert first["summary"]["longest_batch_ms"] == round(longest["ms"], 3)
    assert 0 < longest["ms"] < 10_000, "a batch transaction, bounded by statement_timeout"
    assert longest["batches"] >= old_count / 400, "batches of at most batch_rows keys"

    with create_session() as session:
        labels = sorted(
            ti.rendered_map_index
            for ti in session.query(TaskInstance).filter(
                TaskInstance.dag_id == f"retention__{unique_name}",
                TaskInstance.run_id == first["dag_run"].run_id,
                TaskInstance.task_id == "delete_window",
            )
        )
    assert len(labels) == 6
    assert labels[0].startswith("ids "), "key ranges across tenants by default"

    again = run_dag()
    assert again["state"] == "success"
    assert (again["status"], again["rows_deleted"], again["windows"]) == ("clean", 0, 0)
    assert fingerprint(db, unique_name, sql.SQL("TRUE")) == kept_before


def test_dry_run_counts_and_deletes_nothing(
    run_dag: Callable[..., dict[str, Any]], db: Connection, unique_name: str
) -> None:
    everything = fingerprint(db, unique_name, sql.SQL("TRUE"))
    old_count, _ = fingerprint(db, unique_name, older_than(D - dt.timedelta(days=30)))
    result = run_dag(dry_run=True, window_rows=5000)
    assert result["state"] == "success"
    assert (result["status"], result["dry_run"]) == ("dry_run", True)
    assert (result["rows_counted"], result["rows_deleted"]) == (old_count, 0)
    assert result["rows_remaining"] == old_count
    assert result["window_rows"] == 5000
    assert fingerprint(db, unique_name, sql.SQL("TRUE")) == everything


def test_earlier_logical_date_deletes_only_what_its_cutoff_allows(
    run_dag: Callable[..., dict[str, Any]], db: Connection, unique_name: str
) -> None:
    early = D - dt.timedelta(days=20)
    early_cutoff = early - dt.timedelta(days=30)
    later_cutoff = D - dt.timedelta(days=30)
    between = sql.SQL("created_at >= {} AND created_at < {}").format(
        sql.Literal(early_cutoff), sql.Literal(later_cutoff)
    )
    between_before = fingerprint(db, unique_name, between)
    assert between_before[0] > 0

    result = run_dag(early)
    assert (result["state"], result["status"], result["cutoff"]) == (
        "success",
        "clean",
        early_cutoff,
    )
    assert fingerprint(db, unique_name, older_than(early_cutoff))[0] == 0
    assert fingerprint(db, unique_name, between) == between_before

    later = run_dag(D)
    assert later["rows_deleted"] == between_before[0]
    assert fingerprint(db, unique_name, older_than(later_cutoff))[0] == 0


@pytest.mark.parametrize("timestamp_type", ["timestamptz", "timestamp"])
def test_rows_at_the_cutoff_survive_a_dag_run(
    db: Connection,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    timestamp_type: str,
) -> None:
    cutoff = D - dt.timedelta(days=30)
    create_table(db, unique_name, boundary_rows(cutoff), timestamp_type=timestamp_type)
    policies = tmp_path / "policies.yaml"
    fields = policy_fields(unique_name, window_rows=100, batch_rows=2)
    policies.write_text(yaml.safe_dump({"policies": {unique_name: fields}}))
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    run = bag.dags[f"retention__{unique_name}"].test(logical_date=D)
    assert run.state == "success"
    assert ids_left(db, unique_name) == BOUNDARY_KEPT
    summary = db.execute(
        "SELECT status, windows, rows_deleted FROM retention.runs WHERE policy = %s",
        (unique_name,),
    ).fetchone()
    assert summary == {"status": "clean", "windows": 1, "rows_deleted": 4}


def _with_renditions(db: Connection, table: str) -> str:
    """A renditions table with 2 rows per row of ``table`` (a foreign key, no ON DELETE)."""
    child = f"{table}_renditions"
    names = {"c": sql.Identifier("public", child), "t": sql.Identifier("public", table)}
    for statement in (
        "CREATE TABLE {c} (id bigserial PRIMARY KEY, asset_id bigint NOT NULL REFERENCES {t} (id))",
        "INSERT INTO {c} (asset_id) SELECT t.id FROM {t} AS t, generate_series(1, 2)",
        "CREATE INDEX ON {c} (asset_id)",
    ):
        db.execute(sql.SQL(statement).format(**names))
    return child


@pytest.mark.parametrize("listed", [True, False])
def test_children_go_with_their_parents_or_the_run_fails_before_deleting(
    db: Connection,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    listed: bool,
) -> None:
    seed_event_logs(db, table=f"public.{unique_name}", rows=3000, end=D, days=90, tenants=4)
    child = _with_renditions(db, unique_name)
    cutoff = D - dt.timedelta(days=30)
    old_count, _ = fingerprint(db, unique_name, older_than(cutoff))
    fields = policy_fields(unique_name, window_rows=1000, batch_rows=300)
    if listed:
        fields["children"] = [{"table": child, "foreign_key": "asset_id"}]
    policies = tmp_path / "policies.yaml"
    policies.write_text(yaml.safe_dump({"policies": {unique_name: fields}}))
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    run = bag.dags[f"retention__{unique_name}"].test(logical_date=D)
    orphans = db.execute(
        sql.SQL(
            "SELECT count(*) AS n FROM {c} AS c WHERE NOT EXISTS "
            "(SELECT 1 FROM {t} AS t WHERE t.id = c.asset_id)"
        ).format(c=sql.Identifier("public", child), t=sql.Identifier("public", unique_name))
    ).fetchone()
    assert orphans["n"] == 0
    children_left = db.execute(
        sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier("public", child))
    ).fetchone()["n"]
    if listed:
        assert run.state == "success"
        summary = db.execute(
            "SELECT status, summary FROM retention.runs WHERE policy = %s", (unique_name,)
        ).fetchone()
        assert summary["status"] == "clean"
        assert summary["summary"]["rows_deleted_by_table"] == {
            f"public.{unique_name}": old_count,
            f"public.{child}": 2 * old_count,
        }
        assert children_left == 2 * (3000 - old_count)
        return
    assert run.state == "failed"
    assert fingerprint(db, unique_name, older_than(cutoff))[0] == old_count, "nothing deleted"
    assert children_left == 2 * 3000
    with create_session() as session:
        states = {
            ti.task_id: (ti.state, ti.try_number)
            for ti in session.query(TaskInstance).filter(
                TaskInstance.dag_id == f"retention__{unique_name}",
                TaskInstance.run_id == run.run_id,
            )
        }
    assert states["migrate_schema"] == ("failed", 1), "no retry can mend it"
    assert (
        db.execute(
            "SELECT count(*) AS n FROM retention.runs WHERE policy = %s", (unique_name,)
        ).fetchone()["n"]
        == 0
    ), "never planned"
