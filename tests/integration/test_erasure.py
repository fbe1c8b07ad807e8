"""Urgent erasures: requested once, worked now through the policy's own deleters, holds win,
and every final state leaves a receipt.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from collections.abc import Iterator

import pytest
from psycopg import sql

from devtools.receiver import Receiver
from retention.db.connection import connect_dsn
from retention.erasures.process import ErasureOutcome, _verdict, process_erasure
from retention.erasures.request import (
    ErasureRejected,
    ErasureState,
    request_erasure,
    validate,
)
from retention.holds.store import place_hold
from retention.objects.deleter import work_operations
from retention.objects.kind import OperationsKind
from retention.runs.lease import take_run_lease
from tests.support.children import create_family, family_children
from tests.support.policies import make_policy, remote_fields, remote_policy
from tests.support.remote import enqueue_all, sandbox_sender
from tests.support.tables import count, create_media_table, ids_left, media_with_renditions

NOTIFY = {"http_conn_id": "unused", "endpoint": "/e"}


def erase_remotely(conn, policy, erasure, sandbox, **kw) -> ErasureOutcome:
    """One pass of ``erasure`` of a remote policy, its calls answered by ``sandbox``."""
    return process_erasure(
        conn,
        policy,
        erasure["erasure_id"],
        open_kind=lambda: OperationsKind(policy, sandbox_sender(sandbox)),
        **kw,
    )


def erasures_of(db, policy: str) -> int:
    return count(db, "SELECT count(*) FROM retention.erasures WHERE policy = %s", policy)


def rows_of_tenant(db, name: str, tenant: int) -> int:
    return count(
        db,
        sql.SQL("SELECT count(*) FROM {} WHERE tenant_id = %s")
        .format(sql.Identifier("public", name))
        .as_string(db),
        tenant,
    )


def request(db, policy, scope="tenant", value="2", reason="GDPR art. 17, ticket 1", **kw):
    asked = validate(
        {policy.name: policy},
        policy=policy.name,
        scope=scope,
        value=value,
        reason=reason,
        requested_by="test",
        **kw,
    )
    return request_erasure(db, asked)


def test_a_row_policy_erases_a_tenant_whatever_its_age(db, unique_name):
    create_media_table(db, unique_name, 30, new_rows=30, tenants=3)
    policy = make_policy(unique_name)
    young_of_tenant = rows_of_tenant(db, unique_name, 2)
    erasure, created = request(db, policy)
    assert created
    assert erasure["state"] == "requested"
    outcome = process_erasure(db, policy, erasure["erasure_id"])
    assert outcome.state is ErasureState.DONE
    assert rows_of_tenant(db, unique_name, 2) == 0, "young rows go too: retain_days is ignored"
    assert rows_of_tenant(db, unique_name, 1) == 20
    assert rows_of_tenant(db, unique_name, 3) == 20
    assert outcome.rows_deleted == {policy.table: young_of_tenant}
    row = db.execute(
        "SELECT * FROM retention.erasures WHERE erasure_id = %s", (erasure["erasure_id"],)
    ).fetchone()
    assert row["state"] == "done"
    assert row["finished_at"] is not None


def test_an_erasure_deletes_the_listed_children_of_its_rows_and_counts_them(db, unique_name):
    create_family(db, unique_name)  # NO ACTION foreign keys: a plain delete of a parent fails
    policy = make_policy(unique_name, children=family_children(unique_name))
    erasure, _ = request(db, policy, scope="key", value="2", reason="contract ended")
    outcome = process_erasure(db, policy, erasure["erasure_id"])
    assert outcome.state is ErasureState.DONE, outcome
    assert outcome.rows_deleted == {
        f"public.{unique_name}": 1,
        f"public.{unique_name}_r": 2,
        f"public.{unique_name}_c": 4,
        f"public.{unique_name}_p": 8,
    }
    left = db.execute(
        sql.SQL("SELECT count(*) AS n FROM {} WHERE asset_id = 2").format(
            sql.Identifier("public", f"{unique_name}_r")
        )
    ).fetchone()
    assert left["n"] == 0
    assert 2 not in ids_left(db, unique_name)
    receipt = db.execute(
        "SELECT rows_deleted FROM retention.erasures WHERE erasure_id = %s",
        (erasure["erasure_id"],),
    ).fetchone()
    assert receipt["rows_deleted"] == outcome.rows_deleted


def test_a_remote_erasure_deletes_each_objects_derivatives_too(db, unique_name, sandbox):
    create_media_table(db, unique_name, 12, tenants=3)
    policy = remote_policy(
        unique_name,
        derivatives=[{"name": "thumbnails", "endpoint": "/v1/assets/{object_id}/thumbnails"}],
    )
    erasure, _ = request(db, policy)
    outcome = erase_remotely(db, policy, erasure, sandbox)
    assert outcome.state is ErasureState.DONE, outcome
    erased = ["obj-1", "obj-10", "obj-4", "obj-7"]
    assert outcome.objects == erased
    assert outcome.rows_deleted == {policy.table: 4}
    called = sorted(r["object"] for r in sandbox.state.stats()["requests"])
    assert called == sorted(erased + [f"{obj}/thumbnails" for obj in erased])
    assert rows_of_tenant(db, unique_name, 2) == 0


def test_a_remote_erasures_receipt_counts_the_child_rows_it_deleted(db, unique_name, sandbox):
    """The remote finish deletes each row's listed children with it: the receipt's per-table
    counts name every table the erasure deleted from, as a row policy's do."""
    renditions = media_with_renditions(db, unique_name, 9)
    policy = make_policy(
        unique_name,
        window_per_tenant=False,
        remote=remote_fields(unique_name),
        notify=NOTIFY,
        children=[{"table": renditions, "foreign_key": "asset_id"}],
    )
    parents = rows_of_tenant(db, unique_name, 2)
    children = count(
        db,
        f"SELECT count(*) FROM public.{renditions} WHERE asset_id IN "  # noqa: S608
        f"(SELECT id FROM public.{unique_name} WHERE tenant_id = 2)",
    )
    assert parents > 0
    assert children > 0
    erasure, _ = request(db, policy)
    outcome = erase_remotely(db, policy, erasure, sandbox)
    assert outcome.state is ErasureState.DONE, outcome
    counted = {policy.table: parents, f"public.{renditions}": children}
    assert outcome.rows_deleted == counted
    (event,) = db.execute(
        "SELECT payload FROM retention.outbox WHERE policy = %s AND event_type = "
        "'retention.erased'",
        (policy.name,),
    ).fetchall()
    assert json.loads(event["payload"])["data"]["rows_deleted"] == counted


def test_a_pass_that_fails_part_way_keeps_what_it_deleted_and_passes_are_counted(db, unique_name):
    """Each committed batch counts toward the erasure as it commits: the pass that fails
    after some batches loses none of them, and the retried erasure reports them all."""
    from retention.erasures.process import record_failed_pass

    create_media_table(db, unique_name, 12, tenants=3)
    policy = make_policy(unique_name, batch_rows=1)
    scope = rows_of_tenant(db, unique_name, 2)
    last = count(db, f"SELECT max(id) FROM public.{unique_name} WHERE tenant_id = 2")  # noqa: S608
    db.execute(  # the scope's last row hits a deadlock, this time: an error that may pass
        f"CREATE FUNCTION public.{unique_name}_refuse() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN IF OLD.id = {last} THEN RAISE EXCEPTION 'row {last} refused' "
        "USING ERRCODE = 'deadlock_detected'; END IF; RETURN OLD; END $$"
    )
    db.execute(
        f"CREATE TRIGGER refuse BEFORE DELETE ON public.{unique_name} "
        f"FOR EACH ROW EXECUTE FUNCTION public.{unique_name}_refuse()"
    )
    erasure, _ = request(db, policy)
    with pytest.raises(Exception, match=f"row {last} refused") as failed:
        process_erasure(db, policy, erasure["erasure_id"])
    first = record_failed_pass(db, policy, erasure["erasure_id"], failed.value)
    assert first.state is ErasureState.RUNNING, "retried by the next pass"
    deleted_first = scope - rows_of_tenant(db, unique_name, 2)
    assert deleted_first > 0, "batches before the refused row committed"
    assert first.rows_deleted == {policy.table: deleted_first}
    db.execute(f"DROP TRIGGER refuse ON public.{unique_name}")
    second = process_erasure(db, policy, erasure["erasure_id"])
    assert second.state is ErasureState.DONE, second
    assert second.rows_deleted == {policy.table: scope}
    assert second.passes == 2
    row = db.execute(
        "SELECT rows_deleted, passes FROM retention.erasures WHERE erasure_id = %s",
        (erasure["erasure_id"],),
    ).fetchone()
    assert (row["rows_deleted"], row["passes"]) == ({policy.table: scope}, 2)


def test_finished_erasures_go_after_audit_days_with_their_receipts_open_ones_never(
    db, unique_name, sandbox
):
    from retention.evidence.audit import purge_audit, purge_removed_policies

    create_media_table(db, unique_name, 12, tenants=4)
    policy = remote_policy(unique_name, notify=NOTIFY)
    done, _ = request(db, policy, value="0")
    assert erase_remotely(db, policy, done, sandbox).state is ErasureState.DONE
    failed, _ = request(db, policy, value="1")
    blocked, _ = request(db, policy, value="2")
    open_ = {request(db, policy, value="3")[0]["erasure_id"]}
    open_.add(request(db, policy, scope="key", value="4", reason="x")[0]["erasure_id"])
    db.execute(
        "UPDATE retention.erasures SET state = CASE erasure_id WHEN %s THEN 'failed' "
        "ELSE 'blocked_by_hold' END, finished_at = now() WHERE erasure_id IN (%s, %s)",
        (failed["erasure_id"], failed["erasure_id"], blocked["erasure_id"]),
    )
    db.execute(  # unfinished for ages: still never purged
        "UPDATE retention.erasures SET requested_at = now() - interval '20 years', "
        "state = CASE WHEN scope = 'key' THEN 'running' ELSE state END "
        "WHERE erasure_id = ANY(%s)",
        (list(open_),),
    )
    now = dt.datetime.now(dt.UTC)
    early = purge_audit(db, policy.name, 30, now=now + dt.timedelta(days=29))
    assert (early["erasures"], erasures_of(db, policy.name)) == (0, 5)
    purged = purge_audit(db, policy.name, 30, now=now + dt.timedelta(days=31))
    assert (purged["erasures"], purged["erasure_receipts"]) == (3, 1)
    left = db.execute("SELECT erasure_id FROM retention.erasures WHERE policy = %s", (policy.name,))
    assert {row["erasure_id"] for row in left} == open_
    assert receipts(db, policy.name) == 0
    # a policy removed from the file: its finished erasures go too, by any DAG's purge
    gone = f"{unique_name}_removed"
    db.execute(
        "INSERT INTO retention.erasures (request_key, policy, scope, value, reason, "
        "requested_by, state, finished_at) VALUES (%s, %s, 'tenant', '1', 'r', 't', 'done', "
        "now() - interval '500 days')",
        (f"{gone}-done", gone),
    )
    removed = purge_removed_policies(db, {policy.name}, audit_days=400, now=now)
    assert removed[gone]["erasures"] == 1
    assert erasures_of(db, gone) == 0


def test_the_same_request_twice_is_one_erasure(db, unique_name):
    create_media_table(db, unique_name, 6)
    policy = make_policy(unique_name)
    first, made_first = request(db, policy)
    second, made_second = request(db, policy)
    assert (made_first, made_second) == (True, False)
    assert first["erasure_id"] == second["erasure_id"]
    assert erasures_of(db, policy.name) == 1


@pytest.mark.parametrize(
    ("asked", "says"),
    [
        ({"reason": "  "}, "the reason is empty"),
        ({"policy": "no_such_policy"}, "unknown policy 'no_such_policy'"),
        (
            {"deadline": dt.datetime(2020, 1, 1, tzinfo=dt.UTC)},
            "the deadline 2020-01-01T00:00:00+00:00 is in the past",
        ),
        ({"scope": "key", "value": "seven"}, "the key 'seven' is not an integer"),
        ({"scope": "object", "value": "obj-1"}, "has no remote section"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(db, unique_name, asked, says):
    policy = make_policy(unique_name)
    fields = {
        "policy": policy.name,
        "scope": "tenant",
        "value": "2",
        "reason": "ticket 9",
        "requested_by": "test",
        **asked,
    }
    with pytest.raises(ErasureRejected, match=re.escape(says)) as refused:
        validate({policy.name: policy}, **fields)
    assert "Nothing was written" in str(refused.value)
    assert erasures_of(db, policy.name) == 0


def test_a_scope_matching_nothing_is_a_done_erasure_with_zero_counts(db, unique_name):
    create_media_table(db, unique_name, 6, tenants=3)
    policy = make_policy(unique_name)
    erasure, _ = request(db, policy, value="99")
    outcome = process_erasure(db, policy, erasure["erasure_id"])
    assert outcome.state is ErasureState.DONE
    assert outcome.rows_deleted == {policy.table: 0}
    assert outcome.objects == []


def test_a_hold_wins_and_the_receipt_names_it(db, unique_name, sandbox):
    create_media_table(db, unique_name, 12, tenants=3)
    policy = remote_policy(unique_name, notify=NOTIFY)
    hold = place_hold(
        db, policy=policy.name, match="tenant", value="2", reason="case 991", placed_by="ann"
    )
    erasure, _ = request(db, policy)
    outcome = erase_remotely(db, policy, erasure, sandbox)
    assert outcome.state is ErasureState.BLOCKED_BY_HOLD
    assert outcome.blocking_holds == [{"id": hold.hold_id, "reason": "case 991"}]
    event = db.execute(
        "SELECT payload FROM retention.outbox WHERE policy = %s AND event_type = "
        "'retention.erased'",
        (policy.name,),
    ).fetchall()
    assert len(event) == 1
    data = json.loads(event[0]["payload"])["data"]
    assert data["state"] == "blocked_by_hold"
    assert data["blocking_holds"] == [{"id": hold.hold_id, "reason": "case 991"}]
    assert data["scope"] == {"tenant": "2"}
    assert data["erasure_id"] == erasure["erasure_id"]


def test_a_hold_on_part_of_the_scope_blocks_it_and_is_named(db, unique_name):
    create_media_table(db, unique_name, 12, tenants=3)  # tenant 2: ids 1, 4, 7, 10
    db.execute(f"ALTER TABLE public.{unique_name} ADD COLUMN legal_hold boolean")
    db.execute(f"UPDATE public.{unique_name} SET legal_hold = (id = 7)")  # noqa: S608
    policy = make_policy(unique_name, hold_column="legal_hold")
    hold = place_hold(
        db, policy=policy.name, match="key", value="4", reason="case 17", placed_by="ann"
    )
    place_hold(db, policy=policy.name, match="key", value="5", reason="other tenant", placed_by="x")
    erasure, _ = request(db, policy)
    outcome = process_erasure(db, policy, erasure["erasure_id"])
    assert ids_left(db, unique_name) == [2, 3, 4, 5, 6, 7, 8, 9, 11, 12]
    assert outcome.state is ErasureState.BLOCKED_BY_HOLD, outcome
    assert outcome.rows_deleted == {policy.table: 2}
    assert outcome.blocking_holds == [
        {"id": hold.hold_id, "reason": "case 17"},
        {
            "id": "hold_column",
            "column": "legal_hold",
            "rows": 1,
            "reason": "the row's legal_hold column says it is held",
        },
    ]
    row = db.execute(
        "SELECT state, blocking_holds FROM retention.erasures WHERE erasure_id = %s",
        (erasure["erasure_id"],),
    ).fetchone()
    assert (row["state"], row["blocking_holds"]) == ("blocked_by_hold", outcome.blocking_holds)


def test_a_remote_erasure_names_the_key_hold_inside_its_tenant(db, unique_name, sandbox):
    create_media_table(db, unique_name, 12, tenants=3)
    policy = remote_policy(unique_name, notify=NOTIFY)
    hold = place_hold(
        db, policy=policy.name, match="key", value="10", reason="case 18", placed_by="ann"
    )
    erasure, _ = request(db, policy)
    outcome = erase_remotely(db, policy, erasure, sandbox)
    assert outcome.state is ErasureState.BLOCKED_BY_HOLD, outcome
    assert outcome.blocking_holds == [{"id": hold.hold_id, "reason": "case 18"}]
    assert sorted(outcome.objects) == ["obj-1", "obj-4", "obj-7"]
    assert set(sandbox.state.stats()["effects"]) == {"obj-1", "obj-4", "obj-7"}
    (event,) = db.execute(
        "SELECT payload FROM retention.outbox WHERE policy = %s AND event_type = "
        "'retention.erased'",
        (policy.name,),
    ).fetchall()
    data = json.loads(event["payload"])["data"]
    assert (data["state"], data["blocking_holds"]) == ("blocked_by_hold", outcome.blocking_holds)


def test_a_routine_operation_in_flight_elsewhere_is_waited_for_not_failed(db, unique_name, sandbox):
    create_media_table(db, unique_name, 12, tenants=3)
    policy = remote_policy(unique_name, notify=NOTIFY)
    enqueue_all(db, policy)
    # another worker (a routine drain) has obj-4 in flight when the erasure comes
    db.execute(
        "UPDATE retention.operations SET state = 'in_flight', lease_owner = 'routine-worker', "
        "lease_expires_at = now() + interval '1 hour' WHERE policy = %s AND object_id = 'obj-4'",
        (policy.name,),
    )
    erasure, _ = request(db, policy)
    open_kind = lambda: OperationsKind(policy, sandbox_sender(sandbox))  # noqa: E731
    first = process_erasure(
        db, policy, erasure["erasure_id"], open_kind=open_kind, budget_seconds=1
    )
    assert first.state is ErasureState.RUNNING, first
    assert first.rows_left == 1
    assert erasures_of_state(db, erasure["erasure_id"]) == "running"
    assert receipts(db, policy.name) == 0, "no receipt while its work is in someone's hands"
    # the routine worker gives it back (a retry after a timeout, say): the next pass takes it
    db.execute(
        "UPDATE retention.operations SET state = 'pending', lease_owner = NULL, "
        "lease_expires_at = NULL, not_before = now() + interval '1 hour' "
        "WHERE policy = %s AND object_id = 'obj-4'",
        (policy.name,),
    )
    second = process_erasure(db, policy, erasure["erasure_id"], open_kind=open_kind)
    assert second.state is ErasureState.DONE, second
    assert rows_of_tenant(db, unique_name, 2) == 0
    assert receipts(db, policy.name) == 1


def test_work_still_queued_keeps_a_held_erasure_running(db, unique_name, sandbox):
    create_media_table(db, unique_name, 12, tenants=3)
    policy = remote_policy(unique_name, notify=NOTIFY)
    place_hold(db, policy=policy.name, match="tenant", value="2", reason="case 3", placed_by="a")
    enqueue_all(db, policy)
    db.execute(
        "UPDATE retention.operations SET state = 'in_flight', lease_owner = 'routine-worker', "
        "lease_expires_at = now() + interval '1 hour' WHERE policy = %s AND object_id = 'obj-4'",
        (policy.name,),
    )  # claimed before the hold: the screen had passed it
    erasure, _ = request(db, policy)
    outcome = erase_remotely(db, policy, erasure, sandbox, budget_seconds=1)
    assert outcome.state is ErasureState.RUNNING, outcome
    assert receipts(db, policy.name) == 0, "a receipt only once nothing is queued"


def erasures_of_state(db, erasure_id: int) -> str:
    row = db.execute(
        "SELECT state FROM retention.erasures WHERE erasure_id = %s", (erasure_id,)
    ).fetchone()
    return row["state"]


def receipts(db, policy: str) -> int:
    return count(
        db,
        "SELECT count(*) FROM retention.outbox WHERE policy = %s AND event_type = "
        "'retention.erased'",
        policy,
    )


def test_a_routine_run_holding_the_run_lease_does_not_block_an_erasure(db, unique_name, sandbox):
    create_media_table(db, unique_name, 12, tenants=3)
    policy = remote_policy(unique_name, notify=NOTIFY)
    enqueue_all(db, policy)  # the routine run's operations, some of them the erasure's rows
    lease = take_run_lease(
        db, policy.name, policy.dag_id, "scheduled__routine", lambda _: "running"
    )
    assert lease.taken
    erasure, _ = request(db, policy)
    outcome = erase_remotely(db, policy, erasure, sandbox)
    assert outcome.state is ErasureState.DONE, outcome
    assert sorted(outcome.objects) == sorted(f"obj-{i}" for i in range(1, 13) if i % 3 == 1)
    assert outcome.rows_deleted == {policy.table: 4}
    assert rows_of_tenant(db, unique_name, 2) == 0
    effects = sandbox.state.stats()["effects"]
    assert set(effects) == set(outcome.objects)
    assert set(effects.values()) == {1}
    # the routine run then drains the rest, and touches none of the erased rows again
    work_operations(db, OperationsKind(policy, sandbox_sender(sandbox)), budget_seconds=5)
    effects = sandbox.state.stats()["effects"]
    assert len(effects) == 12
    assert set(effects.values()) == {1}, "each object deleted once"
    events = count(
        db,
        "SELECT count(*) FROM retention.outbox WHERE policy = %s AND event_type = "
        "'retention.erased'",
        policy.name,
    )
    assert events == 1


BACKLOG, TENANTS = 20_050, 401  # 50 rows a tenant


def test_an_erasure_of_fifty_objects_finishes_before_a_tenth_of_a_routine_backlog(
    db, unique_name, sandbox, test_dsn
):
    create_media_table(db, unique_name, BACKLOG, tenants=TENANTS)
    policy = remote_policy(unique_name, rate_per_second=2000, burst=50, claim_batch=50)
    sandbox.state.configure(rate=5000, burst=500)
    assert enqueue_all(db, policy, batch_rows=5000, window_rows=100_000) == BACKLOG
    stop, errors = threading.Event(), []

    def routine_drain() -> None:
        try:
            with connect_dsn(test_dsn) as conn:
                kind = OperationsKind(policy, sandbox_sender(sandbox))
                while not stop.is_set():
                    work_operations(conn, kind, budget_seconds=0.5)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    drain = threading.Thread(target=routine_drain, daemon=True)
    drain.start()
    try:
        while len(sandbox.state.stats()["requests"]) < 200:
            time.sleep(0.01)
        erasure, _ = request(db, policy, value="8")
        with connect_dsn(test_dsn) as conn:
            outcome = erase_remotely(conn, policy, erasure, sandbox, budget_seconds=30)
    finally:
        stop.set()
        drain.join(30)
    assert not errors, errors
    assert outcome.state is ErasureState.DONE, outcome
    erased = {f"obj-{i}" for i in range(1, BACKLOG + 1) if i % TENANTS == 7}  # tenant 8
    assert len(erased) == 50
    assert set(outcome.objects) <= erased
    assert erased <= set(sandbox.state.stats()["effects"]), "every object of the tenant is gone"
    deleted = [r["object"] for r in sandbox.state.stats()["requests"] if r["status"] == 204]
    last = max(i for i, obj in enumerate(deleted) if obj in erased)
    routine = sum(1 for obj in deleted[: last + 1] if obj not in erased)
    assert routine < BACKLOG // 10, f"{routine} routine deletions went ahead of the erasure"


@pytest.mark.parametrize(
    ("facts", "state"),
    [
        # work still queued: running, whatever else (a receipt must not miss it)
        ({"rows_left": 3, "rows_held": 3, "unfinished": 2, "dead": 1}, "running"),
        ({"rows_left": 3, "rows_held": 0, "unfinished": 2, "dead": 0}, "running"),
        ({"rows_left": 3, "rows_held": 0, "unfinished": 0, "dead": 1}, "failed"),
        ({"rows_left": 3, "rows_held": 2, "unfinished": 0, "dead": 1}, "failed"),
        ({"rows_left": 1, "rows_held": 0, "unfinished": 0, "dead": 0}, "failed"),
        ({"rows_left": 3, "rows_held": 2, "unfinished": 0, "dead": 0}, "failed"),
        # every row left is held, nothing queued: the hold wins
        ({"rows_left": 3, "rows_held": 3, "unfinished": 0, "dead": 0}, "blocked_by_hold"),
        ({"rows_left": 0, "rows_held": 0, "unfinished": 0, "dead": 0}, "done"),
    ],
)
def test_the_erasure_verdict(facts, state):
    assert _verdict(**facts)[0].value == state


def test_the_erasure_dag_step_works_every_open_erasure(db, unique_name):
    from retention.airflow.steps import work_erasures_step

    create_media_table(db, unique_name, 9, new_rows=3, tenants=3)
    policy = make_policy(unique_name)
    first, _ = request(db, policy, value="1")
    second, _ = request(db, policy, scope="key", value="5", reason="contract ended")
    done = work_erasures_step([policy], budget_seconds=10)
    mine = {e["erasure_id"]: e for e in done["erasures"] if e["policy"] == policy.name}
    assert mine[first["erasure_id"]]["state"] == "done"
    assert mine[second["erasure_id"]]["state"] == "done"
    assert rows_of_tenant(db, unique_name, 1) == 0
    assert (
        count(
            db,
            sql.SQL("SELECT count(*) FROM {} WHERE id = 5")
            .format(sql.Identifier("public", unique_name))
            .as_string(db),
        )
        == 0
    )
    again = work_erasures_step([policy], budget_seconds=10)
    assert [e for e in again["erasures"] if e["policy"] == policy.name] == []


@pytest.fixture
def alerts_receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """An alert receiver on loopback, as the connection ``erasure_alerts`` the late-erasure
    alerts of these tests go to."""
    receiver = Receiver().start()
    monkeypatch.setenv("AIRFLOW_CONN_ERASURE_ALERTS", receiver.connection())
    yield receiver
    receiver.stop()


def test_an_erasure_past_its_deadline_is_told_once(db, unique_name, monkeypatch, alerts_receiver):
    from retention.airflow.steps import work_erasures_step

    create_media_table(db, unique_name, 6, tenants=3)
    policy = make_policy(unique_name, alerts={"on_erasure_late": "erasure_alerts"})
    erasure, _ = request(db, policy)
    # an erasure that cannot finish (its remote side is down, say): still running, late
    db.execute(
        "UPDATE retention.erasures SET state = 'running', deadline = now() - interval "
        "'2 hours' WHERE erasure_id = %s",
        (erasure["erasure_id"],),
    )
    monkeypatch.setattr(  # each pass leaves it running, as a remote side that is down does
        "retention.airflow.steps.process_erasure",
        lambda _c, _p, erasure_id, **_k: ErasureOutcome(erasure_id, ErasureState.RUNNING),
    )
    monkeypatch.setattr("retention.airflow.steps.list_erasures", _only(erasure["erasure_id"]))
    first = work_erasures_step([policy], budget_seconds=1)
    second = work_erasures_step([policy], budget_seconds=1)
    assert [a["state"] for a in first["late_alerts"]] == ["sent"]
    assert [a["state"] for a in second["late_alerts"]] == ["already_claimed"]
    assert len(alerts_receiver.received) == 1
    message = alerts_receiver.received[0]["json"]
    assert message["kind"] == "erasure_late"
    assert message["figures"]["erasure_id"] == erasure["erasure_id"]
    assert message["runbook"]["section"] == "An erasure is late"


def test_one_failing_erasure_neither_blocks_the_others_nor_the_late_alerts(
    db, unique_name, monkeypatch, alerts_receiver
):
    from retention.airflow import steps
    from retention.rows.deleter import WindowDeleteError

    family, media, locked = f"{unique_name}_f", f"{unique_name}_m", f"{unique_name}_l"
    create_family(db, family)  # listed without its children: the erasure's delete fails
    create_media_table(db, media, 6, tenants=3)
    create_media_table(db, locked, 6, tenants=3)
    alerts = {"on_erasure_late": "erasure_alerts"}
    policies = [
        make_policy(family, alerts=alerts),
        make_policy(media, alerts=alerts),
        make_policy(locked, alerts=alerts),
    ]
    broken, _ = request(db, policies[0], scope="key", value="2")
    fine, _ = request(db, policies[1])
    stuck, _ = request(db, policies[2])
    db.execute(  # the oldest deadline: worked first, and late
        "UPDATE retention.erasures SET deadline = now() - interval '1 hour' WHERE erasure_id = %s",
        (stuck["erasure_id"],),
    )
    real = steps.process_erasure

    def process(conn, policy, erasure_id, **kw):
        if erasure_id == stuck["erasure_id"]:  # a row that stayed locked, this time
            raise WindowDeleteError("window erasure: 1 row(s) stayed locked: keys [4]")
        return real(conn, policy, erasure_id, **kw)

    monkeypatch.setattr(steps, "process_erasure", process)
    mine = {broken["erasure_id"], fine["erasure_id"], stuck["erasure_id"]}
    monkeypatch.setattr(
        steps,
        "list_erasures",
        lambda conn, **kw: [row for row in request_list(conn, **kw) if row["erasure_id"] in mine],
    )
    with pytest.raises(RuntimeError, match=f"erasure {stuck['erasure_id']}: WindowDelete"):
        steps.work_erasures_step(policies, budget_seconds=5)
    states = {
        row["erasure_id"]: (row["state"], row["error"])
        for row in db.execute(
            "SELECT erasure_id, state, error FROM retention.erasures WHERE erasure_id = ANY(%s)",
            (list(mine),),
        )
    }
    assert states[fine["erasure_id"]] == ("done", None)
    assert states[broken["erasure_id"]][0] == "failed"
    assert "ForeignKeyViolation" in states[broken["erasure_id"]][1]
    assert states[stuck["erasure_id"]][0] == "requested"
    assert "stayed locked" in states[stuck["erasure_id"]][1], "recorded, retried next pass"
    assert rows_of_tenant(db, media, 2) == 0
    told = sorted(m["json"]["figures"]["erasure_id"] for m in alerts_receiver.received)
    # the late one, and the one that failed (told at once, before its deadline)
    assert told == sorted([stuck["erasure_id"], broken["erasure_id"]])


def request_list(conn, **kw):
    from retention.erasures.request import list_erasures

    return list_erasures(conn, **kw)


def test_the_demo_requests_an_erasure_and_runs_the_erasure_dag(
    db, unique_name, test_dsn, monkeypatch, tmp_path
):
    import importlib.util
    import types
    from pathlib import Path

    from retention.airflow.steps import work_erasures_step

    scripts = Path(__file__).resolve().parents[2] / "scripts"
    monkeypatch.syspath_prepend(str(scripts))
    spec = importlib.util.spec_from_file_location("erasure_demo", scripts / "demo.py")
    assert spec is not None
    assert spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    create_media_table(db, unique_name, 9, new_rows=3, tenants=3)
    policy = make_policy(unique_name)
    ran: list[str] = []

    def dags_test(dag_id, _logical_date):  # the DAG's one task, as `airflow dags test` runs it
        ran.append(dag_id)
        work_erasures_step([policy], budget_seconds=10)
        return 0, tmp_path / "demo.log"

    monkeypatch.setattr(demo, "load_policies", lambda: types.SimpleNamespace(policies=[policy]))
    monkeypatch.setattr(demo, "dags_test", dags_test)
    erased = demo.run_erasure(test_dsn, policy=policy.name, tenant="2")
    assert ran == ["retention__erasure-requests"]
    assert erased["state"] == "done"
    assert erased["rows_deleted"] == {policy.table: 4}
    assert rows_of_tenant(db, unique_name, 2) == 0


def test_a_failed_erasure_is_told_once_before_its_deadline(
    db, unique_name, monkeypatch, alerts_receiver
):
    """A failed erasure is final: it will not be done by its deadline unless someone acts,
    so the alert does not wait for the deadline to pass."""
    from retention.airflow.steps import work_erasures_step

    create_media_table(db, unique_name, 6, tenants=3)
    policy = make_policy(unique_name, alerts={"on_erasure_late": "erasure_alerts"})
    erasure, _ = request(db, policy)
    db.execute(
        "UPDATE retention.erasures SET state = 'failed', finished_at = now(), "
        "error = '2 dead remote deletion(s)' WHERE erasure_id = %s",
        (erasure["erasure_id"],),
    )
    monkeypatch.setattr("retention.airflow.steps.list_erasures", _only(erasure["erasure_id"]))
    first = work_erasures_step([policy], budget_seconds=1)
    second = work_erasures_step([policy], budget_seconds=1)
    assert [e for e in first["erasures"] if e["erasure_id"] == erasure["erasure_id"]] == []
    assert [a["state"] for a in first["late_alerts"]] == ["sent"]
    assert [a["state"] for a in second["late_alerts"]] == ["already_claimed"]
    (message,) = [r["json"] for r in alerts_receiver.received]
    assert message["kind"] == "erasure_late"
    assert message["figures"]["state"] == "failed"
    assert "failed: it will not be done by its deadline" in message["message"]
    assert "2 dead remote deletion(s)" in message["message"]


def test_an_erasure_pass_shares_one_budget_among_its_erasures(db, unique_name, monkeypatch):
    """The DAG's budget bounds the pass, not each erasure: erasures that each use all they
    are given (a remote side that is down) must not add up to several budgets."""
    from retention.airflow.steps import work_erasures_step

    create_media_table(db, unique_name, 6, tenants=3)
    policy = make_policy(unique_name)
    ids = {request(db, policy, value=str(t))[0]["erasure_id"] for t in (0, 1, 2)}
    given: list[float] = []

    def uses_its_whole_budget(_c, _p, erasure_id, *, budget_seconds, **_k):
        given.append(budget_seconds)
        time.sleep(budget_seconds)
        return ErasureOutcome(erasure_id, ErasureState.RUNNING)

    monkeypatch.setattr("retention.airflow.steps.process_erasure", uses_its_whole_budget)
    monkeypatch.setattr("retention.airflow.steps.list_erasures", _only_these(ids))
    started = time.monotonic()
    work_erasures_step([policy], budget_seconds=1.0)
    took = time.monotonic() - started
    assert sum(given) <= 1.0 + 1e-6, given
    assert took < 2.0, f"a pass with a 1 s budget took {took:.1f} s"


def test_an_open_erasure_of_a_policy_no_longer_loaded_is_named(db, unique_name, monkeypatch):
    """Nobody here would ever work it: skipped in silence, it would stay open unseen."""
    from retention.airflow.steps import work_erasures_step

    create_media_table(db, unique_name, 6, tenants=3)
    gone = make_policy(unique_name)
    kept = make_policy(f"{unique_name}_kept")
    orphan = request(db, gone)[0]["erasure_id"]
    monkeypatch.setattr("retention.airflow.steps.list_erasures", _only_these({orphan}))
    warned: list[str] = []
    monkeypatch.setattr(
        "retention.airflow.steps.log.warning", lambda text, *a: warned.append(text % a)
    )
    result = work_erasures_step([kept], budget_seconds=1.0)
    named = f"{orphan} (policy {gone.name!r})"
    assert result["unknown_policy"] == [named]
    assert any(named in line for line in warned), warned


def _only_these(erasure_ids: set[int]):
    from retention.erasures.request import list_erasures

    def listed(conn, **kw):
        return [row for row in list_erasures(conn, **kw) if row["erasure_id"] in erasure_ids]

    return listed


def _only(erasure_id: int):
    """list_erasures, as the step asks it, for one erasure only: the tables are shared."""
    from retention.erasures.request import list_erasures

    def listed(conn, **kw):
        rows = list_erasures(conn, **kw)
        return [row for row in rows if row["erasure_id"] == erasure_id]

    return listed


def test_an_erasure_pass_delivers_the_receipt_at_once(db, unique_name, sandbox, monkeypatch):
    """The retention.erased receipt is signed and sent by the erasure's own pass, not left
    in the outbox until the policy's next scheduled run."""
    from svix.webhooks import Webhook as SvixWebhook

    from devtools.receiver import Receiver, new_secret
    from retention.airflow.steps import work_erasures_step

    receiver = Receiver(new_secret()).start()
    monkeypatch.setenv("AIRFLOW_CONN_ERASURE_RECEIPTS", receiver.connection())
    try:
        create_media_table(db, unique_name, 6, tenants=3)
        policy = remote_policy(
            unique_name, notify={"http_conn_id": "erasure_receipts", "endpoint": "/hooks/retention"}
        )
        erasure, _ = request(db, policy, value="2")
        done = work_erasures_step([policy], budget_seconds=10)
        assert done["receipts"][policy.name]["done"] >= 1
        verifier = SvixWebhook(receiver.secret)
        bodies = []
        for sent in receiver.received:
            verifier.verify(sent["body"], sent["headers"])  # raises on a bad signature
            bodies.append(json.loads(sent["body"]))
        erased = [b for b in bodies if b["type"] == "retention.erased"]
        assert [b["data"]["erasure_id"] for b in erased] == [erasure["erasure_id"]]
    finally:
        receiver.shutdown()
        receiver.server_close()
