"""Legal holds against the real Postgres: what a hold matches is kept by every deletion
path, from the next statement after it is placed, and is deletable again once lifted."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from devtools.plans import request
from retention.db.connection import Connection, connect_dsn
from retention.evidence.audit import purge_audit
from retention.evidence.explain import explain, render
from retention.evidence.reconcile import reconcile_run
from retention.holds.store import (
    HoldError,
    HoldMatch,
    get_hold,
    lift_hold,
    list_holds,
    matching_holds,
    place_hold,
    release_held_operations,
)
from retention.objects.deleter import ObjectDeleter, work_operations
from retention.objects.kind import OperationsKind
from retention.rows import deleter
from retention.rows.deleter import delete_window
from retention.rows.planner import plan_windows
from tests.integration.test_cli import cli
from tests.support.policies import make_policy, policy_fields, remote_policy
from tests.support.querylog import deletes_from, statements_sent
from tests.support.remote import enqueue_all, sandbox_sender, work
from tests.support.tables import (
    count,
    create_media_table,
    create_table,
    ids_left,
    media_with_renditions,
    old,
)
from tests.support.web import serving


@pytest.fixture(autouse=True)
def no_holds_left(db: Connection) -> Iterator[None]:
    """A hold of every policy would keep other tests' rows: none outlives its test, and
    none another file left on this worker's database is there when one starts."""
    db.execute("DELETE FROM retention.holds")
    yield
    db.execute("DELETE FROM retention.holds")


def holds_count(db: Connection) -> int:
    return count(db, "SELECT count(*) FROM retention.holds")


def test_matching_holds_finds_policy_and_every_policy_holds(
    db: Connection, unique_name: str
) -> None:
    mine = place_hold(
        db, policy=unique_name, match="tenant", value="42", reason="case 991", placed_by="ann"
    )
    everyone = place_hold(
        db, policy=None, match=HoldMatch.OBJECT, value="obj-7", reason="case 991", placed_by="ann"
    )
    place_hold(db, policy="other", match="tenant", value="42", reason="other", placed_by="ann")
    found = matching_holds(db, unique_name, tenant="42", object_id="obj-7")
    assert [h.hold_id for h in found] == [mine.hold_id, everyone.hold_id]
    assert matching_holds(db, unique_name, key=42) == []
    lifted = lift_hold(db, mine.hold_id, reason="case closed", lifted_by="bob")
    assert (lifted.lifted_by, lifted.lift_reason) == ("bob", "case closed")
    assert [h.hold_id for h in matching_holds(db, unique_name, tenant="42")] == []
    listed = {h.hold_id: h for h in list_holds(db, unique_name)}
    assert listed[mine.hold_id].lifted_at is not None
    assert everyone.hold_id in listed
    assert set(everyone.as_json()) >= {
        "id", "policy", "match", "value", "reason", "placed_by", "placed_at", "lifted_at"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"reason": "  "}, "needs a reason"),
        ({"policy": "nope"}, "unknown policy 'nope'"),
        ({"match": "key", "value": "abc"}, "a row key is an integer"),
        ({"match": "row"}, "matches a tenant, a key or an object"),
    ],
)
def test_bad_holds_write_nothing(db: Connection, fields: dict[str, Any], message: str) -> None:
    before = holds_count(db)
    args: dict[str, Any] = {
        "policy": "known", "match": "tenant", "value": "1", "reason": "r", "placed_by": "ann"
    }  # fmt: skip
    with pytest.raises(HoldError, match=message):
        place_hold(db, **{**args, **fields}, known_policies={"known"})
    assert holds_count(db) == before


def test_lifting_needs_a_reason_and_an_active_hold(db: Connection) -> None:
    hold = place_hold(db, policy=None, match="key", value=" 12 ", reason="r", placed_by="ann")
    assert hold.value == "12"
    with pytest.raises(HoldError, match="needs a reason"):
        lift_hold(db, hold.hold_id, reason="", lifted_by="bob")
    lift_hold(db, hold.hold_id, reason="done", lifted_by="bob")
    with pytest.raises(HoldError, match="already lifted"):
        lift_hold(db, hold.hold_id, reason="again", lifted_by="bob")


def test_a_hold_placed_between_two_batches_keeps_its_rows(
    db: Connection, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch reads the holds: a hold placed mid-window applies from the next batch,
    whose delete carries the held-row predicate that the first, with no hold to keep
    anything, ran without; the rows it matches survive and the rest of the window goes."""
    create_table(db, unique_name, [(i, 1 + i % 2, old()) for i in range(1, 41)])
    policy = make_policy(unique_name, window_rows=100, batch_rows=10, window_per_tenant=False)
    (window,) = plan_windows(db, request(policy))
    batches: list[int] = []
    real = deleter.metrics.row_batch

    def place_after_first_batch(name: str, deleted: dict[str, int], ms: float) -> None:
        batches.append(sum(deleted.values()))  # rows by table
        if len(batches) == 1:
            place_hold(
                db, policy=unique_name, match="tenant", value="2", reason="case", placed_by="ann"
            )
            place_hold(db, policy=None, match="key", value="36", reason="case", placed_by="ann")
        real(name, deleted, ms)

    monkeypatch.setattr(deleter.metrics, "row_batch", place_after_first_batch)
    with statements_sent(db) as sent:
        result = delete_window(db, policy, window, batch_rows=10, dry_run=False)
    assert batches[0] == 10, "the first batch ran before the hold"
    with_predicate = ["retention.holds" in d for d in deletes_from(sent, unique_name)]
    assert with_predicate == [False] + [True] * (result.batches - 1), "from the next batch"
    assert result.hold_checked_batches == result.batches - 1 >= 1
    kept = [i for i in range(11, 41) if i % 2 == 1] + [36]
    assert ids_left(db, unique_name) == sorted(kept)
    assert result.rows_deleted == 40 - len(kept)
    summary = reconcile_run(db, policy, "run-1")
    assert (summary["status"], summary["rows_remaining"]) == ("clean", 0)
    assert summary["rows_held"] == len(kept)
    assert summary["dirty_windows"] == []


def test_hold_column_keeps_rows_flagged_by_the_application(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 11)])
    db.execute(f"ALTER TABLE public.{unique_name} ADD COLUMN legal_hold boolean")
    db.execute(f"UPDATE public.{unique_name} SET legal_hold = (id = 3) WHERE id <= 4")  # noqa: S608
    policy = make_policy(unique_name, window_rows=100, hold_column="legal_hold")
    (window,) = plan_windows(db, request(policy))
    result = delete_window(db, policy, window, batch_rows=10, dry_run=False)
    assert ids_left(db, unique_name) == [3]
    assert result.hold_checked_batches == result.batches, "only the row tells its hold_column"


@pytest.mark.parametrize("every_policy", [False, True], ids=["policy_hold", "every_policy_hold"])
@pytest.mark.parametrize(("match", "value"), [("key", "7"), ("tenant", "2")])
def test_any_one_hold_that_could_keep_a_row_puts_the_predicate_in_every_batch(
    db: Connection, unique_name: str, every_policy: bool, match: str, value: str
) -> None:
    """Alone, each kind of hold a row policy's rows can match (its key or its tenant; of
    the policy, or of every policy: ``policy`` NULL) makes each batch's probe answer that a
    hold is possible, so every delete keeps held rows: the probe asks exactly what the
    held-row predicate asks, or a held row would go in a batch that ran without it."""
    create_table(db, unique_name, [(i, 1 + i % 2, old()) for i in range(1, 41)])
    place_hold(
        db,
        policy=None if every_policy else unique_name,
        match=match,
        value=value,
        reason="case",
        placed_by="ann",
    )
    policy = make_policy(unique_name, window_rows=100, batch_rows=10, window_per_tenant=False)
    (window,) = plan_windows(db, request(policy))
    with statements_sent(db) as sent:
        result = delete_window(db, policy, window, batch_rows=10, dry_run=False)
    deletes = deletes_from(sent, unique_name)
    assert len(deletes) == result.batches > 1
    assert all("retention.holds" in d for d in deletes), "every delete keeps held rows"
    assert result.hold_checked_batches == result.batches
    held = [int(value)] if match == "key" else [i for i in range(1, 41) if 1 + i % 2 == int(value)]
    assert ids_left(db, unique_name) == held


@pytest.mark.parametrize("with_children", [False, True], ids=["rows", "rows_and_children"])
def test_a_batch_no_hold_can_touch_deletes_without_the_held_row_predicate(
    db: Connection, unique_name: str, with_children: bool
) -> None:
    """No active hold can keep a row of the table (a lifted hold of the policy, another
    policy's hold, an every-policy hold on an object id, which its rows do not have), and
    it has no hold_column: its batches' deletes leave out the held-row predicate, which
    cost the row deleter about a fifth of its rate, and every old row (and child) goes."""
    create_table(db, unique_name, [(i, 1 + i % 2, old()) for i in range(1, 41)])
    children: list[dict[str, str]] = []
    if with_children:
        child = f"{unique_name}_c"
        db.execute(
            f"CREATE TABLE public.{child} (id bigserial PRIMARY KEY, "
            f"parent_id bigint NOT NULL REFERENCES public.{unique_name} (id))"
        )
        db.execute(f"INSERT INTO public.{child} (parent_id) SELECT id FROM public.{unique_name}")  # noqa: S608
        children = [{"table": child, "foreign_key": "parent_id"}]
    lifted = place_hold(db, policy=unique_name, match="key", value="3", reason="r", placed_by="a")
    lift_hold(db, lifted.hold_id, reason="case closed", lifted_by="bob")
    place_hold(db, policy="another", match="tenant", value="1", reason="r", placed_by="ann")
    place_hold(db, policy=None, match="object", value="obj-1", reason="r", placed_by="ann")
    policy = make_policy(
        unique_name, window_rows=100, batch_rows=10, window_per_tenant=False, children=children
    )
    (window,) = plan_windows(db, request(policy))
    with statements_sent(db) as sent:
        result = delete_window(db, policy, window, batch_rows=10, dry_run=False)
    deletes = deletes_from(sent, unique_name)
    assert len(deletes) == result.batches > 1
    assert not [d for d in deletes if "retention.holds" in d], "no held-row predicate"
    assert result.hold_checked_batches == 0
    assert ids_left(db, unique_name) == []
    if with_children:
        assert count(db, f"SELECT count(*) FROM public.{child}") == 0  # noqa: S608


def operation_states(db: Connection, policy: str) -> dict[str, tuple[str, int]]:
    rows = db.execute(
        "SELECT object_id, state, attempt_count FROM retention.operations WHERE policy = %s",
        (policy,),
    )
    return {r["object_id"]: (r["state"], r["attempt_count"]) for r in rows}


def test_a_held_object_waits_in_held_and_goes_once_lifted(
    db: Connection, unique_name: str, sandbox: Any, test_dsn: str
) -> None:
    """The screen holds the operation just before its call: no call, no attempt spent,
    not dead. Lifting the hold and working again deletes it with exactly one effect."""
    create_media_table(db, unique_name, 6, tenants=2)
    policy = remote_policy(unique_name)
    assert enqueue_all(db, policy) == 6
    hold = place_hold(
        db, policy=unique_name, match="object", value="obj-3", reason="case", placed_by="ann"
    )
    stats = work(test_dsn, policy, sandbox)
    assert (stats.held, stats.dead, stats.failure_classes) == (1, 0, {})
    assert operation_states(db, unique_name)["obj-3"] == ("held", 0)
    assert "obj-3" not in sandbox.state.stats()["effects"]
    assert ids_left(db, unique_name) == [3]
    reason = db.execute(
        "SELECT reason FROM retention.operations WHERE policy = %s AND object_id = 'obj-3'",
        (unique_name,),
    ).fetchone()
    assert reason is not None
    assert f"hold {hold.hold_id}" in reason["reason"]
    assert work(test_dsn, policy, sandbox).claimed == 0, "a held operation is not claimed"
    (key,) = [
        r["operation_key"]
        for r in db.execute(
            "SELECT operation_key FROM retention.operations WHERE policy = %s AND state = 'held'",
            (unique_name,),
        )
    ]
    record = explain(db, key)
    assert [h["id"] for h in record["holds"]] == [hold.hold_id]
    assert record["next"]["action"] == "legal hold"
    assert f"hold {hold.hold_id}" in render(record)

    lift_hold(db, hold.hold_id, reason="case closed", lifted_by="bob")
    assert operation_states(db, unique_name)["obj-3"] == ("pending", 0)
    work(test_dsn, policy, sandbox)
    assert operation_states(db, unique_name)["obj-3"] == ("done", 1)
    assert sandbox.state.stats()["effects"]["obj-3"] == 1
    assert ids_left(db, unique_name) == []


@pytest.mark.parametrize("value", ["2", "002"], ids=["as_the_column_reads", "as_given"])
def test_a_tenant_hold_placed_after_enqueueing_holds_its_objects(
    db: Connection, unique_name: str, sandbox: Any, test_dsn: str, value: str
) -> None:
    """An every-policy hold is kept as given: "002" is read through the integer tenant
    column as 2, by the screen before the call as by the row's delete (compared as text,
    the objects of tenant 2 went while their rows stayed)."""
    create_media_table(db, unique_name, 6, tenants=2)  # tenant 1 + id % 2
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    place_hold(db, policy=None, match="tenant", value=value, reason="case", placed_by="ann")
    windows = ObjectDeleter(
        table=policy.table_spec,
        timeouts=policy.timeouts,
        policy=policy,
        open_kind=lambda: OperationsKind(policy, sandbox_sender(sandbox)),
    )
    for window in plan_windows(db, request(policy)):
        windows.run(db, window, batch_rows=policy.batch_rows, dry_run=False)
    assert ids_left(db, unique_name) == [1, 3, 5]
    assert set(sandbox.state.stats()["effects"]) == {"obj-2", "obj-4", "obj-6"}
    summary = reconcile_run(db, policy, "run-1")
    assert (summary["status"], summary["rows_remaining"]) == ("clean", 0)
    assert (summary["rows_held"], summary["objects_held"]) == (3, 3)
    assert summary["remote"]["eligible_rows_by_state"] == {"held": 3}
    reasons = db.execute(
        "SELECT reason FROM retention.operations WHERE policy = %s AND state = 'held'",
        (unique_name,),
    ).fetchall()
    assert len(reasons) == 3
    assert all("case" in r["reason"] and "hold_column" not in r["reason"] for r in reasons), (
        "the held operation names the hold that keeps it"
    )


def test_a_remote_held_answer_holds_without_spending_an_attempt(
    db: Connection, unique_name: str, sandbox: Any, test_dsn: str
) -> None:
    create_media_table(db, unique_name, 3, tenants=1)
    policy = remote_policy(unique_name, held_statuses=[423], max_attempts=1)
    enqueue_all(db, policy)
    sandbox.state.configure(locked=["obj-2"])
    stats = work(test_dsn, policy, sandbox)
    assert (stats.held, stats.dead) == (1, 0)
    assert operation_states(db, unique_name)["obj-2"] == ("held", 0)
    assert release_held_operations(db, unique_name) == 1, "the next run re-checks it"
    sandbox.state.configure(locked=[])
    work(test_dsn, policy, sandbox)
    assert operation_states(db, unique_name)["obj-2"] == ("done", 1)
    assert ids_left(db, unique_name) == []


def test_the_cli_places_lists_and_lifts_holds(
    db: Connection, unique_name: str, test_dsn: str, tmp_path: Path
) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text(yaml.safe_dump({"policies": {unique_name: policy_fields(unique_name)}}))
    env = {**os.environ, "RETENTION_POLICIES": str(policies)}
    placed = cli(
        "--dsn", test_dsn, "holds", "place", "--policy", unique_name, "--tenant", "42",
        "--reason", "case 991", "--by", "ann", env=env,
    )  # fmt: skip
    assert placed.returncode == 0, placed.stderr
    hold_id = int(placed.stdout.strip().splitlines()[-1])
    everyone = cli("--dsn", test_dsn, "holds", "place", "--object", "o-1", "--reason", "x", env=env)
    assert everyone.returncode == 0, everyone.stderr
    listed = cli("--dsn", test_dsn, "holds", "list", "--policy", unique_name, "--json", env=env)
    lines = [json.loads(line) for line in listed.stdout.splitlines()]
    mine = next(line for line in lines if line["id"] == hold_id)
    assert mine["policy"] == unique_name
    assert (mine["match"], mine["value"], mine["reason"]) == ("tenant", "42", "case 991")
    assert (mine["placed_by"], mine["lifted_at"]) == ("ann", None)
    assert mine["placed_at"]
    assert any(line["policy"] is None and line["value"] == "o-1" for line in lines)
    explained = cli("--dsn", test_dsn, "explain", "42", "--policy", unique_name, env=env)
    assert explained.returncode == 0, explained.stderr
    # 42 is a row key too: the tenant hold "42" is named, as not keeping row 42
    assert "held by" not in explained.stdout
    assert (
        f"also named 42, not keeping this row: hold {hold_id} (tenant 42, policy {unique_name}"
        in explained.stdout
    )
    lifted = cli(
        "--dsn", test_dsn, "holds", "lift", str(hold_id), "--reason", "closed", "--by", "bob",
        env=env,
    )  # fmt: skip
    assert lifted.returncode == 0, lifted.stderr
    again = cli("--dsn", test_dsn, "holds", "list", "--policy", unique_name, "--json", env=env)
    mine = next(json.loads(x) for x in again.stdout.splitlines() if json.loads(x)["id"] == hold_id)
    assert mine["lifted_at"] is not None
    assert mine["lifted_by"] == "bob"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "1", "--reason", ""], "needs a reason"),
        (["--policy", "nope", "--tenant", "1", "--reason", "x"], "unknown policy 'nope'"),
    ],
)
def test_the_cli_refuses_bad_holds_and_writes_nothing(
    db: Connection, test_dsn: str, tmp_path: Path, args: list[str], message: str
) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text(yaml.safe_dump({"policies": {"known": policy_fields("known")}}))
    env = {**os.environ, "RETENTION_POLICIES": str(policies)}
    before = holds_count(db)
    run = cli("--dsn", test_dsn, "holds", "place", *args, env=env)
    assert run.returncode == 2
    assert message in run.stderr
    assert "nothing written" in run.stderr
    assert holds_count(db) == before


def test_active_holds_are_never_purged_and_lifted_ones_follow_audit_days(
    db: Connection, unique_name: str
) -> None:
    kept = place_hold(db, policy=unique_name, match="key", value=1, reason="r", placed_by="a")
    lifted = place_hold(db, policy=unique_name, match="key", value=2, reason="r", placed_by="a")
    lift_hold(db, lifted.hold_id, reason="done", lifted_by="b")
    now = dt.datetime.now(dt.UTC)
    purge_audit(db, unique_name, 30, now=now + dt.timedelta(days=29))
    assert {h.hold_id for h in list_holds(db, unique_name)} == {kept.hold_id, lifted.hold_id}
    purged = purge_audit(db, unique_name, 30, now=now + dt.timedelta(days=3650))
    assert purged["holds"] == 1
    assert [h.hold_id for h in list_holds(db, unique_name)] == [kept.hold_id]


def test_the_api_places_and_lifts_holds_only_for_users_who_may_trigger_the_dag(
    db: Connection,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Placing or lifting needs the right to trigger the policy's DAG (every policy's for
    an every-policy hold); reading needs the right to read it; the user is recorded."""
    from retention.airflow.api import create_app

    other = f"{unique_name}_b"
    policies = tmp_path / "policies.yaml"
    fields = {name: policy_fields(name) for name in (unique_name, other)}
    policies.write_text(yaml.safe_dump({"policies": fields}))
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    mine = f"retention__{unique_name}"

    def may_trigger(user: Any, dag_id: str) -> bool:
        return user is None and dag_id == mine  # the test user may trigger one DAG only

    app = create_app(airflow_auth=False, authorize=lambda _u, _d: True, trigger_right=may_trigger)
    body = {"policy": unique_name, "match": "tenant", "value": "42", "reason": "case 991"}
    with serving(app) as url:
        placed = requests.post(f"{url}/holds", json=body, timeout=10)
        assert placed.status_code == 201, placed.text
        (hold,) = placed.json()["holds"]
        assert (hold["policy"], hold["placed_by"]) == (unique_name, "anonymous")
        before = holds_count(db)
        refused = {
            "other policy": requests.post(
                f"{url}/holds", json={**body, "policy": other}, timeout=10
            ),
            "every policy": requests.post(
                f"{url}/holds", json={**body, "policy": None}, timeout=10
            ),
            "empty reason": requests.post(f"{url}/holds", json={**body, "reason": " "}, timeout=10),
            "unknown policy": requests.post(
                f"{url}/holds", json={**body, "policy": "nope"}, timeout=10
            ),
            "a form": requests.post(f"{url}/holds", data=body, timeout=10),
        }
        assert {k: r.status_code for k, r in refused.items()} == {
            "other policy": 403,
            "every policy": 403,
            "empty reason": 422,
            "unknown policy": 422,
            "a form": 415,
        }
        assert other in refused["other policy"].json()["detail"]
        assert holds_count(db) == before, "nothing written"
        listed = requests.get(f"{url}/holds", params={"policy": unique_name}, timeout=10).json()
        assert hold["id"] in [h["id"] for h in listed["holds"]]
        no_reason = requests.post(f"{url}/holds/{hold['id']}/lift", json={}, timeout=10)
        assert no_reason.status_code == 422
        lifted = requests.post(
            f"{url}/holds/{hold['id']}/lift", json={"reason": "closed"}, timeout=10
        )
        assert lifted.status_code == 200, lifted.text
        assert lifted.json()["lifted_by"] == "anonymous"
        again = requests.post(
            f"{url}/holds/{hold['id']}/lift", json={"reason": "closed"}, timeout=10
        )
        assert again.status_code == 404


def test_a_held_row_keeps_its_children(db: Connection, unique_name: str) -> None:
    """children: go by the keys their parent's delete returned, so a held parent keeps
    its child rows; the unheld rest of the family goes."""
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 6)])
    child = f"{unique_name}_c"
    db.execute(
        f"CREATE TABLE public.{child} (id bigserial PRIMARY KEY, "
        f"parent_id bigint NOT NULL REFERENCES public.{unique_name} (id))"
    )
    db.execute(
        f"INSERT INTO public.{child} (parent_id) "  # noqa: S608
        f"SELECT t.id FROM public.{unique_name} AS t, generate_series(1, 2)"
    )
    policy = make_policy(
        unique_name, window_rows=100, children=[{"table": child, "foreign_key": "parent_id"}]
    )
    place_hold(db, policy=unique_name, match="key", value="3", reason="case", placed_by="ann")
    (window,) = plan_windows(db, request(policy))
    delete_window(db, policy, window, batch_rows=10, dry_run=False)
    assert ids_left(db, unique_name) == [3]
    parents = [r["parent_id"] for r in db.execute(f"SELECT parent_id FROM public.{child}")]  # noqa: S608
    assert parents == [3, 3]


def test_a_hold_placed_during_the_call_keeps_the_row_and_its_children(
    db: Connection, unique_name: str, sandbox: Any, test_dsn: str
) -> None:
    """The screen passed the operation, then a hold came before its confirmation: the
    remote object is gone, but the finish leaves the held row and its children alone and
    the operation waits in held (not superseded). Lifting the hold finishes it."""
    child = media_with_renditions(db, unique_name, 3, per_row=1, tenants=1)
    policy = remote_policy(unique_name, children=[{"table": child, "foreign_key": "asset_id"}])
    enqueue_all(db, policy)
    placed: list[int] = []

    class HoldDuringTheCall(OperationsKind):
        def send(self, job):  # the screen has passed it: a hold arrives now
            if job.row_key == 2 and not placed:
                with connect_dsn(test_dsn) as other:
                    hold = place_hold(
                        other, policy=unique_name, match="key", value="2", reason="case 5",
                        placed_by="ann",
                    )  # fmt: skip
                placed.append(hold.hold_id)
            return super().send(job)

    work_operations(db, HoldDuringTheCall(policy, sandbox_sender(sandbox)), budget_seconds=5)
    assert placed
    assert "obj-2" in sandbox.state.stats()["effects"], "the remote object is gone"
    assert ids_left(db, unique_name) == [2]
    children = count(db, f"SELECT count(*) FROM public.{child} WHERE asset_id = 2")  # noqa: S608
    assert children == 1, "a held row keeps its children"
    assert count(db, f"SELECT count(*) FROM public.{child}") == 1  # noqa: S608
    state = db.execute(
        "SELECT state, failure_class, reason FROM retention.operations "
        "WHERE policy = %s AND object_id = 'obj-2'",
        (unique_name,),
    ).fetchone()
    assert (state["state"], state["failure_class"]) == ("held", "held")
    assert "the remote object is gone" in state["reason"]
    lift_hold(db, placed[0], reason="case closed", lifted_by="bob")
    work_operations(db, OperationsKind(policy, sandbox_sender(sandbox)), budget_seconds=5)
    assert ids_left(db, unique_name) == []
    assert count(db, f"SELECT count(*) FROM public.{child}") == 0  # noqa: S608


def test_the_cli_places_holds_in_the_policies_own_databases(
    db: Connection, unique_name: str, tmp_path: Path
) -> None:
    """Without --dsn or --conn-id a hold goes where the policies' deletes look: a policy's
    hold to its postgres_conn_id, an every-policy hold to each policy's database."""
    second = f"{unique_name}_b"
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        yaml.safe_dump(
            {
                "policies": {
                    unique_name: policy_fields(unique_name),
                    second: policy_fields(second, postgres_conn_id="retention_test_b"),
                }
            }
        )
    )
    unreachable = json.dumps({"conn_type": "postgres", "host": "127.0.0.1", "port": 1})
    env = {
        **os.environ,
        "RETENTION_POLICIES": str(policies),
        "AIRFLOW_CONN_RETENTION_TARGET": unreachable,  # the default: never the right place
        # another connection id of the same database: a second policy database
        "AIRFLOW_CONN_RETENTION_TEST_B": os.environ["AIRFLOW_CONN_RETENTION_TEST"],
    }
    placed = cli(
        "holds", "place", "--policy", unique_name, "--tenant", "42", "--reason", "case 1",
        env=env,
    )  # fmt: skip
    assert placed.returncode == 0, placed.stderr
    hold_id = int(placed.stdout.strip().splitlines()[-1])
    assert count(db, "SELECT count(*) FROM retention.holds WHERE hold_id = %s", hold_id) == 1
    everyone = cli("holds", "place", "--object", f"{unique_name}-o", "--reason", "x", env=env)
    assert everyone.returncode == 0, everyone.stderr
    assert "in connection retention_test_b" in everyone.stdout
    assert (
        count(db, "SELECT count(*) FROM retention.holds WHERE value = %s", f"{unique_name}-o") == 2
    ), "one every-policy hold per policy database"
    wrong = cli(
        "--conn-id", "retention_target", "holds", "place", "--policy", unique_name,
        "--tenant", "43", "--reason", "x", env=env,
    )  # fmt: skip
    assert wrong.returncode == 2
    assert "nothing written" in wrong.stderr
    assert (
        count(
            db,
            "SELECT count(*) FROM retention.holds WHERE policy = %s AND value = '43'",
            unique_name,
        )
        == 0
    )
    # both connection ids reach this one database: the hold is found twice, so say which
    ambiguous = cli("holds", "lift", str(hold_id), "--reason", "closed", env=env)
    assert ambiguous.returncode == 2
    assert "name one with --conn-id" in ambiguous.stderr
    lifted = cli(
        "--conn-id", "retention_test", "holds", "lift", str(hold_id), "--reason", "closed",
        env=env,
    )  # fmt: skip
    assert lifted.returncode == 0, lifted.stderr


def test_a_hold_value_is_read_through_its_columns_type(
    db: Connection, unique_name: str, test_dsn: str, tmp_path: Path
) -> None:
    """Tenant "042" of an integer column is tenant 42: the deletes compare the column's
    text, so a hold kept as typed would match no row and keep nothing."""
    create_table(db, unique_name, [(i, 42, old()) for i in range(1, 4)])
    policies = tmp_path / "policies.yaml"
    policies.write_text(yaml.safe_dump({"policies": {unique_name: policy_fields(unique_name)}}))
    env = {**os.environ, "RETENTION_POLICIES": str(policies)}
    place = ("--dsn", test_dsn, "holds", "place", "--policy", unique_name)
    placed = cli(*place, "--tenant", "042", "--reason", "case 1", env=env)
    assert placed.returncode == 0, placed.stderr
    hold_id = int(placed.stdout.strip().splitlines()[-1])
    assert get_hold(db, hold_id).value == "42"
    assert f"3 row(s) of public.{unique_name} match it now" in placed.stdout
    before = holds_count(db)
    wrong = cli(*place, "--tenant", "forty-two", "--reason", "case 1", env=env)
    assert wrong.returncode == 2
    assert f"'forty-two' is not a value of public.{unique_name}.tenant_id" in wrong.stderr
    no_objects = cli(*place, "--object", "o-1", "--reason", "case 1", env=env)
    assert no_objects.returncode == 2
    assert "has no remote section" in no_objects.stderr
    assert holds_count(db) == before


def test_an_every_policy_tenant_hold_is_read_through_each_tables_column_type(
    db: Connection, unique_name: str
) -> None:
    """An every-policy hold is kept as given ("042"), since policies' tenant columns have
    different types: the deletes read it through each table's own column type, so on an
    integer column it keeps tenant 42's rows (compared as text, it kept none), and a
    value that column's type refuses matches none of its rows (and fails nothing)."""
    create_table(db, unique_name, [(i, 42 if i <= 3 else 7, old()) for i in range(1, 11)])
    for value in ("042", "forty-two"):
        place_hold(db, policy=None, match="tenant", value=value, reason="case 9", placed_by="ann")
    policy = make_policy(unique_name, window_rows=100, batch_rows=4, window_per_tenant=False)
    (window,) = plan_windows(db, request(policy))
    delete_window(db, policy, window, batch_rows=4, dry_run=False)
    assert ids_left(db, unique_name) == [1, 2, 3]


def test_an_every_policy_hold_names_the_database_and_policies_of_each_id(
    db: Connection, unique_name: str, tmp_path: Path
) -> None:
    """An every-policy hold gets one id per policy database: the output says which id is in
    which database, and for which policies, and still ends with an id."""
    others = [f"{unique_name}_b", f"{unique_name}_c"]
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        yaml.safe_dump(
            {
                "policies": {
                    unique_name: policy_fields(unique_name),
                    **{
                        name: policy_fields(name, postgres_conn_id="retention_test_b")
                        for name in others
                    },
                }
            }
        )
    )
    env = {
        **os.environ,
        "RETENTION_POLICIES": str(policies),
        "AIRFLOW_CONN_RETENTION_TEST_B": os.environ["AIRFLOW_CONN_RETENTION_TEST"],
    }
    value = f"{unique_name}-o"
    placed = cli("holds", "place", "--object", value, "--reason", "case 5", env=env)
    assert placed.returncode == 0, placed.stderr
    lines = placed.stdout.strip().splitlines()
    ids = {
        int(row["hold_id"])
        for row in db.execute("SELECT hold_id FROM retention.holds WHERE value = %s", (value,))
    }
    assert len(ids) == 2
    named = {
        int(found[1]): (found[2], found[3])
        for line in lines
        if (found := re.match(r"placed hold (\d+) .* in connection (\S+) \((.*)\), by ", line))
    }
    assert sorted(named) == sorted(ids)
    assert sorted(named.values()) == [
        ("retention_test", f"policy {unique_name}"),
        ("retention_test_b", f"policies {', '.join(others)}"),
    ]
    assert int(lines[-1]) in ids, "the last line is still an id"
