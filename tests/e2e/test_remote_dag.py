"""Remote policies end to end: dag.test() against the sandbox API, and reconciliation."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml
from airflow.models.dagbag import DagBag

from retention.evidence.reconcile import RetentionIncomplete, raise_if_dirty, reconcile_run
from retention.objects.operations import enqueue_window
from retention.rows.planner import plan_windows
from tests.support.env import ROOT
from tests.support.policies import HTTP_CONN_ID, policy_fields, remote_policy
from tests.support.tables import count, create_media_table, request

pytestmark = pytest.mark.e2e

LOGICAL_DATE = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)  # cutoff 2026-03-02


def remote_dag(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **extra):
    extra.setdefault("max_lag_hours", 100_000)  # the test data is months past its cutoff
    fields = policy_fields(name, window_rows=80, batch_rows=40, window_per_tenant=False, **extra)
    fields["remote"] = {
        "http_conn_id": HTTP_CONN_ID,
        "endpoint": "/v1/tenants/{tenant_id}/assets/{object_id}",
        "object_id_column": "object_key",
        "version_column": "version",
        "rate_per_second": 200,
        "burst": 20,
        "limiter_scope": name,
        "pool": "default_pool",
        "max_attempts": 3,
        "request_timeout_seconds": 2,
        "backoff_base_seconds": 0.05,
        "backoff_max_seconds": 0.1,
    }
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({"policies": {name: fields}}))
    monkeypatch.setenv("RETENTION_POLICIES", str(path))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.dags[f"retention__{name}"]


def summary_of(db, name: str, run_id: str) -> dict:
    row = db.execute(
        "SELECT status, summary FROM retention.runs WHERE policy = %s AND run_id = %s",
        (name, run_id),
    ).fetchone()
    assert row is not None
    return row


def test_remote_policy_run_deletes_objects_then_rows(
    db, unique_name, sandbox, tmp_path, monkeypatch
) -> None:
    create_media_table(db, unique_name, 200, tenants=4, new_rows=30)
    dag = remote_dag(unique_name, tmp_path, monkeypatch)
    assert sorted(t.task_id for t in dag.tasks) == [
        "compute_cutoff",
        "delete_window",
        "drain_operations",
        "migrate_schema",
        "plan_windows",
        "purge_audit",
        "reconcile",
    ]
    run = dag.test(logical_date=LOGICAL_DATE)
    assert run.state == "success"
    result = summary_of(db, unique_name, run.run_id)
    assert result["status"] == "clean"
    remote = result["summary"]["remote"]
    assert remote["attempts_by_outcome"] == {"confirmed": 200}
    assert remote["unexplained_rows"] == 0
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 30  # noqa: S608
    server = sandbox.state.stats()
    assert len(server["effects"]) == 200
    assert set(server["effects"].values()) == {1}, "zero duplicate remote effects"
    assert server["requests"][0]["object"].startswith("obj-")
    paths = {r["object"] for r in server["requests"]}
    assert len(paths) == 200

    again = dag.test(logical_date=LOGICAL_DATE)
    assert again.state == "success"
    assert len(sandbox.state.stats()["requests"]) == 200, "a rerun calls nothing"


def test_dead_operations_are_an_explained_backlog_until_too_old(
    db, unique_name, sandbox, tmp_path, monkeypatch
) -> None:
    create_media_table(db, unique_name, 50)
    sandbox.state.configure(reject=["obj-5"])
    dag = remote_dag(unique_name, tmp_path, monkeypatch)
    run = dag.test(logical_date=LOGICAL_DATE)
    assert run.state == "success"
    result = summary_of(db, unique_name, run.run_id)
    assert result["status"] == "backlog"
    remote = result["summary"]["remote"]
    assert remote["eligible_rows_by_state"] == {"dead": 1}
    assert remote["dead_total"] == 1
    assert remote["oldest_overdue_hours"] > 24
    assert result["summary"]["rows_deleted"] == 49

    late = remote_dag(unique_name, tmp_path, monkeypatch, max_lag_hours=1)
    failed = late.test(logical_date=LOGICAL_DATE)
    assert failed.state == "failed"
    assert summary_of(db, unique_name, failed.run_id)["status"] == "dirty"


def test_rows_without_an_operation_are_unexplained(db, unique_name) -> None:
    create_media_table(db, unique_name, 10)
    policy = remote_policy(unique_name)
    plan_windows(db, request(policy))  # planned, but nothing enqueued
    summary = reconcile_run(db, policy, "run-1")
    assert summary["status"] == "dirty"
    assert summary["remote"]["unexplained_rows"] == 10
    with pytest.raises(RetentionIncomplete, match="10 of them have no pending"):
        raise_if_dirty(summary)


def test_replay_dag_moves_chosen_dead_operations_back(
    db, unique_name, sandbox, tmp_path, monkeypatch
) -> None:
    create_media_table(db, unique_name, 10)
    sandbox.state.configure(reject=["obj-3", "obj-4"])
    dag = remote_dag(unique_name, tmp_path, monkeypatch)
    assert dag.test(logical_date=LOGICAL_DATE).state == "success"
    dead = {
        r["object_id"]: r["operation_key"]
        for r in db.execute(
            "SELECT object_id, operation_key FROM retention.dead_operations WHERE policy = %s",
            (unique_name,),
        )
    }
    assert set(dead) == {"obj-3", "obj-4"}
    replay = DagBag(dag_folder=str(ROOT / "dags")).dags["retention__replay"]
    run = replay.test(
        run_conf={
            "policy": unique_name,
            "operation_keys": [dead["obj-3"]],
            "reason": "object released from legal hold",
        }
    )
    assert run.state == "success"
    rows = {
        r["object_id"]: r["state"]
        for r in db.execute(
            "SELECT object_id, state FROM retention.operations WHERE policy = %s AND "
            "object_id IN ('obj-3', 'obj-4')",
            (unique_name,),
        )
    }
    assert rows == {"obj-3": "pending", "obj-4": "dead"}
    audit = db.execute(
        "SELECT operation_keys, reason FROM retention.replays WHERE policy = %s", (unique_name,)
    ).fetchone()
    assert audit == {"operation_keys": [dead["obj-3"]], "reason": "object released from legal hold"}
    sandbox.state.configure(reject=[])
    assert dag.test(logical_date=LOGICAL_DATE).state == "success"
    assert count(db, f"SELECT count(*) FROM public.{unique_name} WHERE object_key = 'obj-3'") == 0  # noqa: S608


def test_dry_run_of_a_remote_policy_calls_nothing(
    db, unique_name, sandbox, tmp_path, monkeypatch
) -> None:
    create_media_table(db, unique_name, 20)
    policy = remote_policy(unique_name)
    plan_windows(db, request(policy, run_id="earlier"))
    for window in plan_windows(db, request(policy, run_id="earlier")):
        enqueue_window(db, policy, window, 100)  # pending work a drain step would pick up
    dag = remote_dag(unique_name, tmp_path, monkeypatch)
    run = dag.test(logical_date=LOGICAL_DATE, run_conf={"dry_run": True})
    assert run.state == "success"
    assert sandbox.state.stats()["requests"] == [], "a dry run deletes nothing, remotely either"
    result = summary_of(db, unique_name, run.run_id)
    assert result["status"] == "dry_run"
    assert result["summary"]["rows_counted"] == 20
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 20  # noqa: S608
