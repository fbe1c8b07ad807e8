"""Remote policies end to end: dag.test() against the sandbox API, and reconciliation.

Dates are relative to today, so the suite passes on any day: the run's cutoff
is 31 days ago and the old rows are one hour older than it (25 hours overdue,
inside the default ``max_lag_hours`` of 72).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.models.dagbag import DagBag

from devtools.plans import request
from retention.evidence.reconcile import RetentionIncomplete, raise_if_dirty, reconcile_run
from retention.objects.enqueue import enqueue_window
from retention.rows.planner import plan_windows
from tests.support.env import ROOT
from tests.support.policies import policy_fields, remote_fields, remote_policy
from tests.support.remote import work
from tests.support.tables import count, create_media_table
from tests.support.xcoms import xcoms_per_task

pytestmark = pytest.mark.e2e

TODAY = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
LOGICAL_DATE = TODAY - dt.timedelta(days=1)
CUTOFF = LOGICAL_DATE - dt.timedelta(days=30)  # retain_days 30
AN_HOUR = dt.timedelta(hours=1)
RECEIVER_CONN = "events_receiver"


def remote_dag(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **extra: Any):
    notify = extra.pop("notify", None)
    remote = remote_fields(
        name,
        endpoint="/v1/tenants/{tenant_id}/assets/{object_id}",
        rate_per_second=200,
        burst=20,
        max_attempts=3,
        **extra.pop("remote", {}),
    )
    fields = policy_fields(
        name, window_rows=80, batch_rows=40, window_per_tenant=False, remote=remote, **extra
    )
    if notify is not None:
        fields["notify"] = notify
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({"policies": {name: fields}}))
    monkeypatch.setenv("RETENTION_POLICIES", str(path))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.dags[f"retention__{name}"]


def media(db, name: str, rows: int, **kw: Any) -> None:
    create_media_table(db, name, rows, cutoff=CUTOFF, old_age=AN_HOUR, **kw)


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
    media(db, unique_name, 200, tenants=4, new_rows=30)
    db.execute(f"ALTER TABLE public.{unique_name} ALTER COLUMN tenant_id TYPE text")
    db.execute(
        f"UPDATE public.{unique_name} SET object_key = 'a b/ü#' || id, tenant_id = 't 7/ä' "  # noqa: S608
        "WHERE id = 1"
    )
    dag = remote_dag(unique_name, tmp_path, monkeypatch)
    assert sorted(t.task_id for t in dag.tasks) == [
        "compute_cutoff",
        "delete_window",
        "drain_operations",
        "migrate_schema",
        "plan_windows",
        "purge_audit",
        "reconcile",
        "take_run_lease",
    ]
    run = dag.test(logical_date=LOGICAL_DATE)
    assert run.state == "success"
    result = summary_of(db, unique_name, run.run_id)
    assert result["status"] == "clean"
    remote = result["summary"]["remote"]
    assert remote["attempts_by_outcome"] == {"confirmed": 200}
    assert remote["unexplained_rows"] == 0
    assert result["summary"]["max_lag_hours"] == 72, "the real default of a remote policy"
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 30  # noqa: S608
    server = sandbox.state.stats()
    assert len(server["effects"]) == 200
    assert set(server["effects"].values()) == {1}, "zero duplicate remote effects"
    paths = sorted(r["path"] for r in server["requests"])
    expected = [
        *(f"/v1/tenants/{1 + n % 4}/assets/obj-{n}" for n in range(2, 201)),
        "/v1/tenants/t%207%2F%C3%A4/assets/a%20b%2F%C3%BC%231",
    ]
    assert paths == sorted(expected), "tenant and object id in their place, URL-encoded"

    again = dag.test(logical_date=LOGICAL_DATE)
    assert again.state == "success"
    assert len(sandbox.state.stats()["requests"]) == 200, "a rerun calls nothing"


def test_dead_operations_are_an_explained_backlog_until_too_old(
    db, unique_name, sandbox, tmp_path, monkeypatch
) -> None:
    media(db, unique_name, 50)
    sandbox.state.configure(reject=["obj-5"])
    dag = remote_dag(unique_name, tmp_path, monkeypatch)
    run = dag.test(logical_date=LOGICAL_DATE)
    assert run.state == "success"
    result = summary_of(db, unique_name, run.run_id)
    assert result["status"] == "backlog"
    remote = result["summary"]["remote"]
    assert remote["eligible_rows_by_state"] == {"dead": 1}
    assert remote["dead_total"] == 1
    assert 24 < remote["oldest_overdue_hours"] < 72, "overdue, but within the default 72 h"
    assert result["summary"]["rows_deleted"] == 49

    late = remote_dag(unique_name, tmp_path, monkeypatch, max_lag_hours=1)
    failed = late.test(logical_date=LOGICAL_DATE)
    assert failed.state == "failed"
    assert summary_of(db, unique_name, failed.run_id)["status"] == "dirty"


def test_windows_that_never_ran_make_the_run_dirty(
    db, unique_name, sandbox, tmp_path, monkeypatch
) -> None:
    """Credentials refused: the drain stops, every window is skipped, and rows that pending
    operations of an earlier run explain must still not make the run green."""
    media(db, unique_name, 20)
    policy = remote_policy(unique_name)
    for window in plan_windows(db, request(policy, run_id="earlier", cutoff=CUTOFF)):
        enqueue_window(db, policy, window, 100)
    sandbox.state.configure(deny_all=True)
    dag = remote_dag(unique_name, tmp_path, monkeypatch)
    run = dag.test(logical_date=LOGICAL_DATE)
    assert run.state == "failed"
    result = summary_of(db, unique_name, run.run_id)
    assert result["status"] == "dirty"
    assert result["summary"]["remote"]["unexplained_rows"] == 0, "every row has an operation"
    assert result["summary"]["windows_unfinished"], "the windows never ran"
    assert len(sandbox.state.stats()["requests"]) == 5, "auth_failure_limit calls, then stop"


def test_rows_without_an_operation_are_unexplained(db, unique_name) -> None:
    create_media_table(db, unique_name, 10)
    policy = remote_policy(unique_name)
    plan_windows(db, request(policy))  # planned, but nothing enqueued
    summary = reconcile_run(db, policy, "run-1")
    assert summary["status"] == "dirty"
    assert summary["remote"]["unexplained_rows"] == 10
    with pytest.raises(RetentionIncomplete, match="10 of them have no pending"):
        raise_if_dirty(summary)


def test_a_restored_row_whose_operation_is_done_makes_reconcile_dirty(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 3)
    policy = remote_policy(unique_name)
    for window in plan_windows(db, request(policy)):
        enqueue_window(db, policy, window, 100)
    work(test_dsn, policy, sandbox)
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 0  # noqa: S608
    db.execute(  # restored from a backup: same key, same version as the deleted row
        f"INSERT INTO public.{unique_name} VALUES (2, 1, %s, 'obj-2', 1)",  # noqa: S608
        (dt.datetime(2026, 2, 27, tzinfo=dt.UTC),),
    )
    summary = reconcile_run(db, policy, "run-1")
    assert summary["status"] == "dirty"
    assert summary["remote"]["eligible_rows_by_state"] == {"done": 1}
    assert summary["remote"]["unexplained_rows"] == 1


def test_replay_dag_moves_chosen_dead_operations_back(
    db, unique_name, sandbox, tmp_path, monkeypatch
) -> None:
    media(db, unique_name, 10)
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
    assert xcoms_per_task("retention__replay", run.run_id) == {
        ("migrate_schema", -1): 1,
        ("replay", -1): 1,
    }, "one XCom per task, not one per key of its result"
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
        "SELECT operation_keys, reason, filters FROM retention.replays WHERE policy = %s",
        (unique_name,),
    ).fetchone()
    assert (audit["operation_keys"], audit["reason"]) == (
        [dead["obj-3"]],
        "object released from legal hold",
    )
    assert audit["filters"]["operation_keys"] == [dead["obj-3"]]
    sandbox.state.configure(reject=[])
    after_replay = dag.test(logical_date=LOGICAL_DATE)
    assert after_replay.state == "success"
    assert count(db, f"SELECT count(*) FROM public.{unique_name} WHERE object_key = 'obj-3'") == 0  # noqa: S608
    summary = summary_of(db, unique_name, after_replay.run_id)["summary"]
    # the replayed operation is deleted by the drain step, and the run says so
    assert summary["rows_deleted_by_drain"] == 1
    assert summary["rows_deleted"] == summary["rows_deleted_by_windows"] + 1
    assert summary["drain"]["passes"] == 1


def test_dry_run_of_a_remote_policy_calls_nothing(
    db, unique_name, sandbox, events_receiver, tmp_path, monkeypatch
) -> None:
    media(db, unique_name, 20)
    policy = remote_policy(unique_name)
    for window in plan_windows(db, request(policy, run_id="earlier", cutoff=CUTOFF)):
        enqueue_window(db, policy, window, 100)  # pending work a drain step would pick up
    db.execute(  # and an event left undelivered by an earlier run
        "INSERT INTO retention.outbox (event_id, policy, operation_key, event_type, payload) "
        "VALUES (%s, %s, 'k', 'retention.deleted', '{}')",
        (f"evt_{unique_name}", unique_name),
    )
    dag = remote_dag(unique_name, tmp_path, monkeypatch, notify=NOTIFY)
    run = dag.test(logical_date=LOGICAL_DATE, run_conf={"dry_run": True})
    assert run.state == "success"
    assert sandbox.state.stats()["requests"] == [], "a dry run deletes nothing, remotely either"
    assert events_receiver.received == [], "and delivers nothing"
    result = summary_of(db, unique_name, run.run_id)
    assert result["status"] == "dry_run"
    assert result["summary"]["events"]["delivery"] == {"skipped": "dry run: nothing is delivered"}
    assert result["summary"]["rows_counted"] == 20
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 20  # noqa: S608


NOTIFY = {
    "http_conn_id": RECEIVER_CONN,
    "endpoint": "/hooks/retention",
    "max_attempts": 2,
    "backoff_base_seconds": 3600,
    "backoff_max_seconds": 3600,
}


def outbox(db, policy: str) -> dict[tuple[str, int], int]:
    rows = db.execute(
        "SELECT state, attempts, count(*) AS n FROM retention.outbox WHERE policy = %s "
        "GROUP BY state, attempts",
        (policy,),
    )
    return {(r["state"], r["attempts"]): r["n"] for r in rows}


def test_events_are_delivered_in_the_run_and_leftovers_in_the_next(
    db, unique_name, sandbox, events_receiver, tmp_path, monkeypatch
) -> None:
    media(db, unique_name, 6)
    dag = remote_dag(unique_name, tmp_path, monkeypatch, notify=NOTIFY)
    assert dag.get_task("deliver_events").upstream_task_ids == {"delete_window"}
    events_receiver.statuses = [204, 204, 429]  # the third asks to slow down: the pass stops
    first = dag.test(logical_date=LOGICAL_DATE)
    assert first.state == "success"
    assert outbox(db, unique_name) == {("delivered", 1): 2, ("pending", 0): 4}, (
        "the 429 spent no attempt, and the rest were handed back"
    )
    events = summary_of(db, unique_name, first.run_id)["summary"]["events"]
    # counted by reconcile after deliver_events ended: the summary agrees with the outbox
    assert (events["delivered_this_run"], events["pending_after_delivery"]) == (2, 4)
    assert events["pending_why"].startswith("delivery stopped"), events["pending_why"]
    db.execute(  # the snoozed event's Retry-After has passed
        "UPDATE retention.outbox SET not_before = now() WHERE policy = %s", (unique_name,)
    )
    second = dag.test(logical_date=LOGICAL_DATE)
    assert second.state == "success"
    assert outbox(db, unique_name) == {("delivered", 1): 6}, "leftovers of the first run"
    assert len(events_receiver.events) == 6


def test_a_failed_delivery_fails_the_run(
    db, unique_name, sandbox, events_receiver, tmp_path, monkeypatch
) -> None:
    media(db, unique_name, 2)
    dag = remote_dag(unique_name, tmp_path, monkeypatch, notify={**NOTIFY, "max_attempts": 1})
    events_receiver.statuses = [500, 500]
    run = dag.test(logical_date=LOGICAL_DATE)
    assert run.state == "failed"
    assert outbox(db, unique_name) == {("dead", 1): 2}
    result = summary_of(db, unique_name, run.run_id)
    assert result["status"] == "dirty"
    assert result["summary"]["rows_remaining"] == 0, "the rows are gone, their events are not"
    problems = result["summary"]["events"]["problems"]
    assert problems[0].startswith("2 dead event(s)")
    assert problems[1].startswith("deliver_events failed: DeliveryIncomplete")
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["deliver_events"] == "failed"
    assert states["reconcile"] == "failed", "reconcile runs after the delivery and reports it"

    replay = DagBag(dag_folder=str(ROOT / "dags")).dags["retention__replay"]
    since = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).isoformat()
    replayed = replay.test(run_conf={"kind": "events", "policy": unique_name, "since": since})
    assert replayed.state == "success"
    assert outbox(db, unique_name) == {("pending", 0): 2}
    audit = db.execute(
        "SELECT kind, filters FROM retention.replays WHERE policy = %s", (unique_name,)
    ).fetchone()
    assert audit["kind"] == "events"
    assert audit["filters"]["since"] == since
