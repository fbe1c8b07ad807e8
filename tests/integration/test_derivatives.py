"""Derivative objects (``remote.derivatives``): an object's row goes only when every
resource of it is confirmed, against the real Postgres and the sandbox API on loopback."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import threading
import time
from collections import Counter
from typing import Any

import pytest
from svix.webhooks import Webhook as SvixWebhook

from devtools.plans import CUTOFF, request
from retention.db.connection import Connection, connect_dsn
from retention.db.sqlfiles import query
from retention.events.hints import Hint, apply
from retention.evidence.audit import purge_audit
from retention.evidence.explain import explain, explain_row, render
from retention.evidence.lookup import find_operations
from retention.evidence.reconcile import explain_remote, reconcile_run
from retention.evidence.replay import dead_operations, replay_dead
from retention.holds.store import place_hold
from retention.objects.enqueue import enqueue_window
from retention.objects.finish import AtomicFinish
from retention.objects.keys import Operation, derivative_key
from retention.objects.kind import EndpointSuspect, OperationsKind
from retention.policy import parse_policy
from retention.queue.classify import Outcome
from retention.queue.leased import OPERATIONS, Finish, LeasedQueue, State
from retention.queue.worker import Attempt
from retention.rows.children import CoupledTableError, rows_of_key
from retention.rows.planner import plan_windows
from tests.support.children import remote_family
from tests.support.policies import make_policy, remote_fields, remote_policy
from tests.support.remote import deliver, enqueue_all, work
from tests.support.tables import count, create_media_table, create_table, media_with_renditions, old

THUMBNAILS = {"name": "thumbnails", "endpoint": "/v1/assets/{object_id}/thumbnails"}
RECEIVER_CONN = "events_receiver"


def derivative_policy(name: str, **remote: Any):
    """A policy whose objects have a thumbnails derivative; slow backoffs, so a retried
    resource is never due again within the same pass."""
    fields: dict[str, Any] = {
        "derivatives": [THUMBNAILS],
        "backoff_base_seconds": 30,
        "backoff_max_seconds": 60,
        **remote,
    }
    return remote_policy(name, **fields)


def rows_left(db: Connection, name: str) -> list[int]:
    return [r["id"] for r in db.execute(f"SELECT id FROM public.{name} ORDER BY id")]  # noqa: S608


def resources(db: Connection, policy, object_id: str) -> dict[str, dict[str, Any]]:
    """Each resource's operation of one object, by resource name."""
    rows = db.execute(
        "SELECT resource, operation_key, parent_key, state, failure_class, last_status_code "
        "FROM retention.operations WHERE policy = %s AND object_id = %s",
        (policy.name, object_id),
    )
    return {r["resource"]: r for r in rows}


def make_due(db: Connection, policy) -> None:
    db.execute(
        "UPDATE retention.operations SET not_before = now() "
        "WHERE policy = %s AND state = 'pending'",
        (policy.name,),
    )


def calls(sandbox) -> Counter[str]:
    """Requests the sandbox received, by what they named (``obj-1``, ``obj-1/thumbnails``)."""
    return Counter(r["object"] for r in sandbox.state.stats()["requests"])


def test_each_resource_is_its_own_operation_keyed_from_the_object(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 3)
    policy = derivative_policy(unique_name)
    assert enqueue_all(db, policy) == 3, "the count is of objects enqueued"
    assert enqueue_all(db, policy) == 0
    total = count(db, "SELECT count(*) FROM retention.operations WHERE policy = %s", policy.name)
    assert total == 6, "one operation per resource of each object, enqueued once"
    ops = resources(db, policy, "obj-2")
    assert ops["object"]["parent_key"] is None
    assert ops["thumbnails"]["parent_key"] == ops["object"]["operation_key"]
    assert ops["thumbnails"]["operation_key"] == derivative_key(
        ops["object"]["operation_key"], "thumbnails"
    )
    work(test_dsn, policy, sandbox)
    assert rows_left(db, unique_name) == []
    assert calls(sandbox) == Counter(
        {f"obj-{i}{suffix}": 1 for i in (1, 2, 3) for suffix in ("", "/thumbnails")}
    )
    keys = {r["key"] for r in sandbox.state.stats()["requests"]}
    stored = {
        r["operation_key"]
        for r in db.execute(
            "SELECT operation_key FROM retention.operations WHERE policy = %s", (policy.name,)
        )
    }
    assert keys == stored, "each resource's call carries its own operation key"


def test_a_derivative_answering_503_keeps_the_row_until_it_is_confirmed(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 3)
    sandbox.state.configure(fail_5xx={"obj-1/thumbnails": 1})
    policy = derivative_policy(unique_name)
    enqueue_all(db, policy)
    work(test_dsn, policy, sandbox)
    ops = resources(db, policy, "obj-1")
    assert ops["object"]["state"] == "done", "the object itself was confirmed"
    assert (ops["thumbnails"]["state"], ops["thumbnails"]["last_status_code"]) == ("pending", 503)
    assert rows_left(db, unique_name) == [1], "the row waits for its thumbnails"
    since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    waiting = explain_remote(db, policy, CUTOFF, since)["eligible_rows_by_state"]
    assert waiting == {"pending": 1}, "a row waiting on a pending derivative is backlog"
    record = explain(db, ops["object"]["operation_key"])
    assert record["row"] == {"all_resources_confirmed": False, "waiting_on": ["thumbnails"]}
    make_due(db, policy)
    work(test_dsn, policy, sandbox)
    assert resources(db, policy, "obj-1")["thumbnails"]["state"] == "done"
    assert rows_left(db, unique_name) == []
    assert calls(sandbox)["obj-1"] == 1, "the object is never called again"
    assert calls(sandbox)["obj-1/thumbnails"] == 2


def test_a_derivative_answering_429_is_snoozed_per_retry_after_on_its_own_operation(
    db, unique_name, sandbox, test_dsn
) -> None:
    """The thumbnails endpoint answers 429 with Retry-After: 2, then 204. Its operation
    (not the object's) is pending until Retry-After, with no attempt spent and the answer
    recorded; the scope closes; the row goes only with the thumbnails' 204; and the scope
    granted a token for every call, the derivative's included."""
    create_media_table(db, unique_name, 1)
    sandbox.state.configure(rate_limited={"obj-1/thumbnails": 1}, retry_after_seconds=2)
    policy = derivative_policy(unique_name)

    def operation(resource: str) -> dict[str, Any]:
        return db.execute(
            "SELECT state, attempt_count, rate_limited_count, failure_class, last_status_code, "
            "not_before FROM retention.operations "
            "WHERE policy = %s AND object_id = 'obj-1' AND resource = %s",
            (policy.name, resource),
        ).fetchone()

    def attempts(resource: str) -> list[tuple[int, int, str]]:
        rows = db.execute(
            "SELECT a.attempt_no, a.status_code, a.outcome_class "
            "FROM retention.attempts AS a JOIN retention.operations AS o USING (operation_key) "
            "WHERE o.policy = %s AND o.resource = %s ORDER BY a.attempt_no",
            (policy.name, resource),
        ).fetchall()
        return [(r["attempt_no"], r["status_code"], r["outcome_class"]) for r in rows]

    def limiter() -> dict[str, Any]:
        return db.execute(
            "SELECT granted_total, throttled_total, closed_until FROM retention.rate_limiters "
            "WHERE scope = %s",
            (policy.remote.limiter_scope,),
        ).fetchone()

    enqueue_all(db, policy)
    first = work(test_dsn, policy, sandbox)
    thumbnails, obj = operation("thumbnails"), operation("object")
    assert (
        thumbnails["state"],
        thumbnails["attempt_count"],
        thumbnails["rate_limited_count"],
        thumbnails["failure_class"],
        thumbnails["last_status_code"],
    ) == ("pending", 0, 1, "rate_limited", 429), "snoozed: no attempt spent"
    (answered,) = db.execute(
        "SELECT a.finished_at FROM retention.attempts AS a "
        "JOIN retention.operations AS o USING (operation_key) "
        "WHERE o.policy = %s AND o.resource = 'thumbnails'",
        (policy.name,),
    ).fetchall()
    snooze = (thumbnails["not_before"] - answered["finished_at"]).total_seconds()
    assert 2.0 <= snooze <= 2.5, "Retry-After plus at most 10% jitter, not the 30 s backoff"
    assert attempts("thumbnails") == [(1, 429, "rate_limited")]
    assert (obj["state"], obj["attempt_count"], obj["rate_limited_count"]) == ("done", 1, 0)
    assert (obj["failure_class"], obj["last_status_code"]) == (None, 204)
    assert attempts("object") == [(1, 204, "confirmed")], "the object's own is unaffected"
    assert rows_left(db, unique_name) == [1], "the row waits for the thumbnails' 204"
    scope = limiter()
    assert scope["throttled_total"] == 1, "the derivative's 429 closed the scope"
    assert scope["closed_until"] >= answered["finished_at"] + dt.timedelta(seconds=2)

    time.sleep(max(0.0, (thumbnails["not_before"] - dt.datetime.now(dt.UTC)).total_seconds()))
    second = work(test_dsn, policy, sandbox)
    assert operation("thumbnails")["state"] == "done"
    assert attempts("thumbnails") == [(1, 429, "rate_limited"), (2, 204, "confirmed")]
    assert rows_left(db, unique_name) == []
    assert calls(sandbox) == Counter({"obj-1": 1, "obj-1/thumbnails": 2})
    granted = limiter()["granted_total"]
    assert granted == first.tokens_taken + second.tokens_taken
    assert granted >= 3, "a token for each call: the object's and the thumbnails' two"


def test_a_dead_derivative_keeps_the_row_explain_names_it_and_replay_finishes_it(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 4)
    sandbox.state.configure(hold=["obj-2/thumbnails"])  # 403, while other calls succeed
    policy = derivative_policy(unique_name, backoff_base_seconds=0.05, backoff_max_seconds=0.1)
    enqueue_all(db, policy)
    for _ in range(6):
        work(test_dsn, policy, sandbox)
        make_due(db, policy)
    ops = resources(db, policy, "obj-2")
    assert ops["object"]["state"] == "done"
    assert (ops["thumbnails"]["state"], ops["thumbnails"]["failure_class"]) == ("dead", "http_403")
    assert calls(sandbox)["obj-2/thumbnails"] == 3, "dead on the third refusal"
    assert rows_left(db, unique_name) == [2], "a dead derivative keeps its row"
    since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    remote = explain_remote(db, policy, CUTOFF, since)
    assert remote["eligible_rows_by_state"] == {"dead": 1}, "the row is counted as its dead one"
    assert remote["unexplained_rows"] == 0
    (dead,) = dead_operations(db, policy=policy.name)
    assert (dead["object_id"], dead["resource"]) == ("obj-2", "thumbnails")

    (match,) = find_operations(db, "2", policy=policy.name)  # the row key names the object
    record = explain(db, match["operation_key"])
    assert record["row"] == {"all_resources_confirmed": False, "waiting_on": ["thumbnails"]}
    states = {r["name"]: (r["state"], r["failure_class"]) for r in record["resources"]}
    assert states == {"object": ("done", None), "thumbnails": ("dead", "http_403")}
    assert record["next"]["action"] == "human review"
    assert "thumbnails dead (http_403" in record["next"]["detail"]
    assert "the row waits on thumbnails" in render(record)
    derivative = explain(db, ops["thumbnails"]["operation_key"])
    assert derivative["resource"] == "thumbnails"
    assert derivative["object_key"] == ops["object"]["operation_key"]

    sandbox.state.configure(hold=[])
    replayed = replay_dead(
        db,
        policy=policy.name,
        operation_keys=[ops["thumbnails"]["operation_key"]],
        requested_by="test",
        reason="thumbnail store fixed",
    )
    assert replayed["operation_keys"] == [ops["thumbnails"]["operation_key"]]
    work(test_dsn, policy, sandbox)
    assert rows_left(db, unique_name) == []
    assert calls(sandbox)["obj-2"] == 1, "replaying the derivative does not call the object"
    assert explain(db, match["operation_key"])["row"]["all_resources_confirmed"] is True


def test_a_dead_derivative_keeps_the_row_and_its_children_until_the_replay_finishes_it(
    db, unique_name, sandbox, test_dsn
) -> None:
    """As above, with a child table in children:. While the thumbnails are dead, the row
    and its children stay (the other rows went with theirs); the replay's confirmation
    deletes the row and its children in its finish."""
    renditions = media_with_renditions(db, unique_name, 4)
    sandbox.state.configure(hold=["obj-2/thumbnails"])
    policy = remote_policy(
        unique_name,
        children=[{"table": renditions, "foreign_key": "asset_id"}],
        derivatives=[THUMBNAILS],
        backoff_base_seconds=0.05,
        backoff_max_seconds=0.1,
    )
    enqueue_all(db, policy)
    for _ in range(6):
        work(test_dsn, policy, sandbox)
        make_due(db, policy)

    def renditions_by_asset() -> dict[int, int]:
        rows = db.execute(
            f"SELECT asset_id, count(*) AS n FROM public.{renditions} GROUP BY 1"  # noqa: S608
        )
        return {r["asset_id"]: r["n"] for r in rows}

    ops = resources(db, policy, "obj-2")
    assert (ops["object"]["state"], ops["thumbnails"]["state"]) == ("done", "dead")
    assert rows_left(db, unique_name) == [2], "a dead derivative keeps its row"
    assert renditions_by_asset() == {2: 2}, "and the row's children; the others went"
    (dead,) = dead_operations(db, policy=policy.name)
    assert dead["operation_key"] == ops["thumbnails"]["operation_key"]

    sandbox.state.configure(hold=[])
    replay_dead(
        db,
        policy=policy.name,
        operation_keys=[ops["thumbnails"]["operation_key"]],
        requested_by="test",
        reason="thumbnail store fixed",
    )
    replayed = work(test_dsn, policy, sandbox)
    assert rows_left(db, unique_name) == []
    assert renditions_by_asset() == {}, "the replay's finish took the children with the row"
    assert replayed.rows_by_table == {f"public.{unique_name}": 1, f"public.{renditions}": 2}
    assert calls(sandbox)["obj-2"] == 1, "replaying the derivative does not call the object"


def _die_before_a_derivative_call(test_dsn: str, policy, url: str) -> None:
    """Child process: work one operation per batch, and die when a derivative is next."""
    from retention.objects.deleter import work_operations
    from retention.queue.http import plain_sender

    send = OperationsKind.send

    def send_or_die(self, job):
        if job.resource != "object":
            os._exit(17)
        return send(self, job)

    OperationsKind.send = send_or_die  # type: ignore[method-assign]
    with connect_dsn(test_dsn) as conn:
        work_operations(conn, OperationsKind(policy, plain_sender(url, 1)))


def test_a_crash_between_the_object_and_its_derivative_calls_only_the_derivative(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 1)
    policy = derivative_policy(
        unique_name, claim_batch=1, request_timeout_seconds=0.5, lease_seconds=60
    )
    enqueue_all(db, policy)
    db.execute(  # the object is due first, so its confirmation is recorded before the crash
        "UPDATE retention.operations SET not_before = now() - interval '1 minute' "
        "WHERE policy = %s AND parent_key IS NULL",
        (policy.name,),
    )
    child = multiprocessing.get_context("fork").Process(
        target=_die_before_a_derivative_call, args=(test_dsn, policy, sandbox.url)
    )
    child.start()
    child.join(30)
    assert child.exitcode == 17
    ops = resources(db, policy, "obj-1")
    assert (ops["object"]["state"], ops["thumbnails"]["state"]) == ("done", "in_flight")
    assert rows_left(db, unique_name) == [1], "the object alone never deletes the row"
    assert calls(sandbox) == Counter({"obj-1": 1})
    db.execute(
        "UPDATE retention.operations SET lease_expires_at = now() - interval '1 second' "
        "WHERE policy = %s AND state = 'in_flight'",
        (policy.name,),
    )
    stats = work(test_dsn, policy, sandbox)
    assert stats.claimed == 1
    assert calls(sandbox) == Counter({"obj-1": 1, "obj-1/thumbnails": 1}), (
        "the resumed run called only the derivative"
    )
    assert rows_left(db, unique_name) == []


def test_the_event_lists_every_remote_resource_once_all_are_confirmed(
    db, unique_name, sandbox, events_receiver, test_dsn
) -> None:
    create_media_table(db, unique_name, 2)
    sandbox.state.configure(fail_5xx={"obj-1/thumbnails": 1})
    notify = {
        "http_conn_id": RECEIVER_CONN,
        "endpoint": "/hooks/retention",
        "timeout_seconds": 2.0,
        "backoff_base_seconds": 0.01,
        "backoff_max_seconds": 0.02,
    }
    policy = remote_policy(
        unique_name,
        notify=notify,
        derivatives=[THUMBNAILS, {"name": "transcodes", "endpoint": "/v1/transcodes/{object_id}"}],
        backoff_base_seconds=30,
        backoff_max_seconds=60,
    )
    enqueue_all(db, policy)
    work(test_dsn, policy, sandbox)
    written = db.execute(
        "SELECT object_id FROM retention.outbox AS e JOIN retention.operations AS o "
        "USING (operation_key) WHERE e.policy = %s",
        (policy.name,),
    ).fetchall()
    assert [r["object_id"] for r in written] == ["obj-2"], "no event before every resource"
    make_due(db, policy)
    work(test_dsn, policy, sandbox)
    assert deliver(test_dsn, policy, events_receiver).done == 2
    verifier = SvixWebhook(events_receiver.secret)
    by_object = {}
    for sent in events_receiver.received:
        verifier.verify(sent["body"], sent["headers"])
        data = json.loads(sent["body"])["data"]
        by_object[data["object_id"]] = data
    assert set(by_object) == {"obj-1", "obj-2"}
    for object_id, data in by_object.items():
        ops = resources(db, policy, object_id)
        assert data["operation_key"] == ops["object"]["operation_key"], "keyed by the object"
        remote = data["resources"]["remote"]
        assert [r["name"] for r in remote] == ["object", "thumbnails", "transcodes"]
        assert [r["operation_key"] for r in remote] == [
            ops[r["name"]]["operation_key"] for r in remote
        ]
        assert all(r["confirmed_at"].endswith("Z") for r in remote)
        assert all(r["status_code"] == 204 for r in remote)
    thumbnails = {r["name"]: r for r in by_object["obj-1"]["resources"]["remote"]}["thumbnails"]
    assert thumbnails["attempts"] == 2, "the 503 and the confirmation"


@pytest.mark.parametrize("with_children", [False, True])
def test_two_finishes_confirming_an_objects_last_resources_at_once_delete_its_row(
    db, unique_name, test_dsn, with_children: bool
) -> None:
    """The object's confirmation and its derivative's are recorded by two workers at the
    same moment: the later finish must see the earlier one's confirmation (it waits for
    the object's lock), so the row does not stay behind with every resource confirmed;
    with a child table, the children go with it, and only with it."""
    policy = derivative_policy(unique_name)
    renditions = f"{unique_name}_r"
    if not with_children:
        create_media_table(db, unique_name, 1)
    else:
        media_with_renditions(db, unique_name, 1)
        policy = remote_policy(
            unique_name,
            children=[{"table": renditions, "foreign_key": "asset_id"}],
            derivatives=[THUMBNAILS],
        )
    enqueue_all(db, policy)
    keys = resources(db, policy, "obj-1")
    queue = LeasedQueue(OPERATIONS, policy.name, policy.remote.lease)
    conn_a, conn_b = connect_dsn(test_dsn), connect_dsn(test_dsn)
    try:
        claimed = {
            owner: Operation.from_row(queue.claim(conn, owner, 1)[0])
            for owner, conn in (("worker-a", conn_a), ("worker-b", conn_b))
        }
        assert {op.resource for op in claimed.values()} == {"object", "thumbnails"}

        def confirmed(op: Operation) -> Attempt:
            now = time.time()
            return Attempt(
                op, Finish(state=State.DONE, outcome=Outcome.CONFIRMED, status=204), now, now
            )

        with conn_a.transaction():  # worker a's finish, not committed yet
            AtomicFinish(policy).record(conn_a, "worker-a", [confirmed(claimed["worker-a"])], None)
            if with_children:
                kept = f"SELECT count(*) FROM public.{renditions}"  # noqa: S608
                assert count(conn_a, kept) == 2, "one resource confirmed: the children stay"
            later = threading.Thread(
                target=AtomicFinish(policy).record,
                args=(conn_b, "worker-b", [confirmed(claimed["worker-b"])], None),
            )
            later.start()
            later.join(0.5)
            assert later.is_alive(), "the later finish waits for the object's lock"
        later.join(10)
    finally:
        conn_a.close()
        conn_b.close()
    states = {r["state"] for r in resources(db, policy, "obj-1").values()}
    assert states == {"done"}
    assert keys["object"]["operation_key"] in {op.key for op in claimed.values()}
    assert rows_left(db, unique_name) == [], "one of the two finishes deleted the row"
    if with_children:
        assert count(db, f"SELECT count(*) FROM public.{renditions}") == 0  # noqa: S608


def test_a_derivatives_404s_are_judged_by_its_own_endpoint_not_the_objects(
    db, unique_name, sandbox, test_dsn
) -> None:
    """The objects answer 204, their thumbnails only 404 (a wrong template): the object's
    2xx does not make the thumbnails' 404s count; the breaker stops the task naming the
    derivative, and no row goes."""
    create_media_table(db, unique_name, 3)
    sandbox.state.configure(not_found_derivatives=["thumbnails"])
    policy = derivative_policy(unique_name, not_found_breaker=3)
    enqueue_all(db, policy)
    with pytest.raises(EndpointSuspect) as tripped:
        work(test_dsn, policy, sandbox)
    assert "/v1/assets/{object_id}/thumbnails (derivative 'thumbnails')" in str(tripped.value)
    assert rows_left(db, unique_name) == [1, 2, 3]
    for object_id in ("obj-1", "obj-2", "obj-3"):
        ops = resources(db, policy, object_id)
        assert ops["object"]["state"] == "done"
        assert ops["thumbnails"]["state"] == "pending", "held back, nothing deleted on it"


def test_a_derivative_may_refuse_404_when_the_object_accepts_it(
    db, unique_name, sandbox, test_dsn
) -> None:
    """``not_found_is_deleted: false`` on one derivative: its 404 is a rejection (dead,
    the row stays), while the object's own 404 still confirms."""
    create_media_table(db, unique_name, 1)
    sandbox.state.configure(not_found_derivatives=["thumbnails"])
    strict = {**THUMBNAILS, "not_found_is_deleted": False}
    policy = derivative_policy(unique_name, derivatives=[strict])
    enqueue_all(db, policy)
    work(test_dsn, policy, sandbox)
    ops = resources(db, policy, "obj-1")
    assert (ops["thumbnails"]["state"], ops["thumbnails"]["failure_class"]) == ("dead", "http_404")
    assert ops["object"]["state"] == "done"
    assert rows_left(db, unique_name) == [1]


def test_the_audit_purge_keeps_an_objects_evidence_while_its_row_waits(
    db, unique_name, sandbox, test_dsn
) -> None:
    """Past the audit horizon, an object whose derivative is still live (its row still
    there) keeps its confirmed operations; a finished object's go, all of them."""
    create_media_table(db, unique_name, 2)
    sandbox.state.configure(fail_5xx={"obj-1/thumbnails": 1})
    policy = derivative_policy(unique_name)
    enqueue_all(db, policy)
    work(test_dsn, policy, sandbox)
    db.execute(
        "UPDATE retention.operations SET done_at = now() - interval '400 days' "
        "WHERE policy = %s AND state = 'done'",
        (policy.name,),
    )
    purged = purge_audit(db, policy.name, audit_days=30)
    assert purged["operations"] == 2, "obj-2's object and thumbnails"
    assert set(resources(db, policy, "obj-1")) == {"object", "thumbnails"}
    assert resources(db, policy, "obj-2") == {}


def test_a_hinted_object_gets_its_derivatives_due_with_it(
    db, unique_name, sandbox, test_dsn
) -> None:
    """A signed hint makes an object due: its derivatives are enqueued in the same
    transaction, due at the same time, and a pass deletes every resource, then the row."""
    create_media_table(db, unique_name, 2)
    policy = derivative_policy(unique_name)
    applied = apply(db, Hint(webhook_id="msg_1", policy=policy, objects=[("obj-1", None)]))
    ops = resources(db, policy, "obj-1")
    assert set(ops) == {"object", "thumbnails"}
    assert applied["operations"] == [ops["object"]["operation_key"]]
    assert {op["state"] for op in ops.values()} == {"pending"}
    work(test_dsn, policy, sandbox)
    assert calls(sandbox) == Counter({"obj-1": 1, "obj-1/thumbnails": 1})
    assert rows_left(db, unique_name) == [2]


def test_children_wait_with_their_row_for_every_resource_and_the_event_counts_them(
    db, unique_name, sandbox, events_receiver, test_dsn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """children: and remote.derivatives: together. The object is confirmed while its
    thumbnails answer 503: its row and the row's children stay (the foreign key would
    refuse the row alone, and children without their row would be lost evidence). Once
    the thumbnails are confirmed, the children, the row and the event go together."""
    renditions = media_with_renditions(db, unique_name, 2)
    sandbox.state.configure(fail_5xx={"obj-1/thumbnails": 1})
    policy = remote_policy(
        unique_name,
        notify={"http_conn_id": RECEIVER_CONN, "endpoint": "/hooks/retention"},
        children=[{"table": renditions, "foreign_key": "asset_id"}],
        derivatives=[THUMBNAILS],
        backoff_base_seconds=30,
        backoff_max_seconds=60,
    )
    enqueue_all(db, policy)

    def no_fallback(*args: Any) -> None:  # a failed batch statement (an FK) would land here
        raise AssertionError("the batch's finish failed and fell back to one by one")

    monkeypatch.setattr(AtomicFinish, "_one_by_one", no_fallback)
    first = work(test_dsn, policy, sandbox)
    assert len(first.transactions) == len(first.batches) == 1, "one finish transaction"

    def renditions_of(asset: int) -> int:
        query = f"SELECT count(*) FROM public.{renditions} WHERE asset_id = %s"  # noqa: S608
        return count(db, query, asset)

    assert rows_left(db, unique_name) == [1], "obj-2 went whole; obj-1 waits on its thumbnails"
    assert (renditions_of(1), renditions_of(2)) == (2, 0), "children stay with their row"
    make_due(db, policy)
    second = work(test_dsn, policy, sandbox)
    assert len(second.transactions) == len(second.batches) == 1, "one finish transaction"
    assert rows_left(db, unique_name) == []
    assert renditions_of(1) == 0
    assert deliver(test_dsn, policy, events_receiver).done == 2
    for sent in events_receiver.received:
        data = json.loads(sent["body"])["data"]
        assert data["resources"]["tables"] == {
            f"public.{unique_name}": 1,
            f"public.{renditions}": 2,
        }, data["object_id"]
        assert [r["name"] for r in data["resources"]["remote"]] == ["object", "thumbnails"]


def test_children_stay_with_their_row_when_a_sibling_resources_lease_was_lost(
    db, unique_name, test_dsn
) -> None:
    """Worker A claims an object and its thumbnails together; the object's lease expires
    and worker B reclaims it; A then records both as confirmed. Only the thumbnails are
    A's to record, so the object is not done and the row stays: its children must stay
    with it (one statement decides both). B's confirmation then takes them all."""
    renditions = media_with_renditions(db, unique_name, 1)
    policy = remote_policy(
        unique_name,
        children=[{"table": renditions, "foreign_key": "asset_id"}],
        derivatives=[THUMBNAILS],
        claim_batch=2,
    )
    enqueue_all(db, policy)
    queue = LeasedQueue(OPERATIONS, policy.name, policy.remote.lease)
    conn_a, conn_b = connect_dsn(test_dsn), connect_dsn(test_dsn)

    def confirmed(op: Operation) -> Attempt:
        now = time.time()
        done = Finish(state=State.DONE, outcome=Outcome.CONFIRMED, status=204)
        return Attempt(op, done, now, now)

    try:
        by_a = [Operation.from_row(row) for row in queue.claim(conn_a, "worker-a", 2)]
        assert {op.resource for op in by_a} == {"object", "thumbnails"}
        db.execute(
            "UPDATE retention.operations SET lease_expires_at = now() - interval '1 second' "
            "WHERE policy = %s AND parent_key IS NULL",
            (policy.name,),
        )
        by_b = [Operation.from_row(row) for row in queue.claim(conn_b, "worker-b", 2)]
        assert [op.resource for op in by_b] == ["object"]
        AtomicFinish(policy).record(conn_a, "worker-a", [confirmed(op) for op in by_a], None)
        rendition_rows = f"SELECT count(*) FROM public.{renditions}"  # noqa: S608
        assert rows_left(db, unique_name) == [1], "the object is B's: not confirmed yet"
        assert count(db, rendition_rows) == 2, "the children stay with their row"
        recorded = AtomicFinish(policy).record(
            conn_b, "worker-b", [confirmed(op) for op in by_b], None
        )
        assert rows_left(db, unique_name) == []
        assert count(db, rendition_rows) == 0
        assert recorded.rows_by_table == {f"public.{unique_name}": 1, f"public.{renditions}": 2}
    finally:
        conn_a.close()
        conn_b.close()


def test_an_object_enqueued_before_its_derivatives_were_added_waits_for_them(
    db, unique_name, sandbox, test_dsn
) -> None:
    """The object's operation was enqueued (and is still due) before the policy gained
    its thumbnails: enqueueing the window again inserts nothing new, yet the object gets
    its thumbnails operation, and its row goes only once both are confirmed."""
    create_media_table(db, unique_name, 2)
    enqueue_all(db, remote_policy(unique_name))
    policy = derivative_policy(unique_name)
    enqueue_all(db, policy)
    assert set(resources(db, policy, "obj-1")) == {"object", "thumbnails"}
    work(test_dsn, policy, sandbox)
    assert calls(sandbox) == Counter(
        {f"obj-{i}{suffix}": 1 for i in (1, 2) for suffix in ("", "/thumbnails")}
    )
    assert rows_left(db, unique_name) == []


def test_the_finish_keeps_a_row_while_a_named_resource_has_no_operation(
    db, unique_name, test_dsn
) -> None:
    """An object operation in flight before the thumbnails were added is confirmed by a
    worker of the new policy: with no thumbnails operation at all, the object alone is
    not every resource, so the row stays, and explain names the missing resource."""
    create_media_table(db, unique_name, 1)
    old = remote_policy(unique_name)
    enqueue_all(db, old)
    policy = derivative_policy(unique_name)
    queue = LeasedQueue(OPERATIONS, policy.name, policy.remote.lease)
    with connect_dsn(test_dsn) as conn:
        claimed = [Operation.from_row(row) for row in queue.claim(conn, "worker-a", 5)]
        assert [op.resource for op in claimed] == ["object"]
        now = time.time()
        done = Finish(state=State.DONE, outcome=Outcome.CONFIRMED, status=204)
        AtomicFinish(policy).record(conn, "worker-a", [Attempt(claimed[0], done, now, now)], None)
    assert rows_left(db, unique_name) == [1], "the thumbnails were never called"
    record = explain(db, claimed[0].key, {policy.name: policy.remote.resources})
    assert record["row"] == {"all_resources_confirmed": False, "waiting_on": ["thumbnails"]}


def test_a_foreign_key_added_after_planning_fails_the_pass_before_any_call(
    db, unique_name, sandbox, test_dsn
) -> None:
    """An unlisted foreign key appears after the windows were planned and enqueued (or
    the replay DAG, which never plans, re-drives them): the pass refuses it before its
    first call, so the API never deletes an object whose row could not go."""
    renditions = media_with_renditions(db, unique_name, 2, per_row=0)
    policy = remote_policy(unique_name, children=[{"table": renditions, "foreign_key": "asset_id"}])
    enqueue_all(db, policy)
    db.execute(
        f"CREATE TABLE public.{unique_name}_n (id bigserial PRIMARY KEY, "
        f"asset_id bigint REFERENCES public.{unique_name} (id))"
    )
    with pytest.raises(CoupledTableError, match=f"{unique_name}_n"):
        work(test_dsn, policy, sandbox)
    assert calls(sandbox) == Counter(), "no object was deleted remotely"
    assert rows_left(db, unique_name) == [1, 2]


def test_reconcile_names_the_resource_nobody_will_finish(db, unique_name) -> None:
    """Two dead derivatives, one discarded: the row is dead (the other still needs a
    review), never hidden as discarded; and a pending object with a dead derivative is
    dead, not backlog: nobody will finish it."""
    create_media_table(db, unique_name, 2)
    policy = derivative_policy(
        unique_name,
        derivatives=[THUMBNAILS, {"name": "transcodes", "endpoint": "/v1/transcodes/{object_id}"}],
    )
    enqueue_all(db, policy)
    one = resources(db, policy, "obj-1")
    two = resources(db, policy, "obj-2")
    db.execute(
        "UPDATE retention.operations SET state = 'done', done_at = now() WHERE operation_key = %s",
        (one["object"]["operation_key"],),
    )
    db.execute(
        "UPDATE retention.operations SET state = 'dead', updated_at = now() "
        "WHERE operation_key = ANY(%s)",
        (
            [
                one["thumbnails"]["operation_key"],
                one["transcodes"]["operation_key"],
                two["thumbnails"]["operation_key"],
            ],
        ),
    )
    pair = sorted([one["thumbnails"]["operation_key"], one["transcodes"]["operation_key"]])
    discard = (
        "INSERT INTO retention.discards (operation_key, policy, discarded_by, dead_since) "
        "SELECT operation_key, policy, 'someone', updated_at FROM retention.operations "
        "WHERE operation_key = %s"
    )
    db.execute(discard, (pair[0],))
    since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    for _ in range(3):  # whichever of obj-1's two is discarded, the other decides
        by_state = explain_remote(db, policy, CUTOFF, since)["eligible_rows_by_state"]
        assert by_state == {"dead": 2}, "obj-1: one dead not discarded; obj-2: a dead derivative"
    db.execute(discard, (pair[1],))
    by_state = explain_remote(db, policy, CUTOFF, since)["eligible_rows_by_state"]
    assert by_state == {"dead": 1, "discarded": 1}


def test_rows_deleted_by_table_counts_the_drains_deletions_too(
    db, unique_name, sandbox, test_dsn
) -> None:
    """The window's pass deletes obj-2 and its children; obj-1's thumbnails answer 503
    and the drain deletes it later: the summary's figures by table include the drain's,
    and its figure for the policy's table equals rows_deleted."""
    renditions = media_with_renditions(db, unique_name, 2)
    sandbox.state.configure(fail_5xx={"obj-1/thumbnails": 1})
    policy = remote_policy(
        unique_name,
        children=[{"table": renditions, "foreign_key": "asset_id"}],
        derivatives=[THUMBNAILS],
        backoff_base_seconds=30,
        backoff_max_seconds=60,
    )
    for window in plan_windows(db, request(policy, "run-1")):
        enqueue_window(db, policy, window, 100)
        work(test_dsn, policy, sandbox, scope=window.window_key)
    assert rows_left(db, unique_name) == [1]
    make_due(db, policy)
    drained = work(test_dsn, policy, sandbox)  # the drain: no window
    db.execute(
        query("run_record_drain"),
        {"policy": policy.name, "run_id": "run-1", "drain": json.dumps(drained.as_dict())},
    )
    assert rows_left(db, unique_name) == []
    summary = reconcile_run(db, policy, "run-1")
    assert summary["rows_deleted"] == 2
    assert summary["rows_deleted_by_table"] == {
        f"public.{unique_name}": 2,
        f"public.{renditions}": 4,
    }


def test_a_timeout_on_the_objects_advisory_lock_is_not_blamed_on_a_row_lock(
    db, unique_name, test_dsn, caplog: pytest.LogCaptureFixture
) -> None:
    """Another worker holds the object's advisory lock past lock_timeout: the warning
    says the wait was for that lock, and looks up no row-lock holders."""
    create_media_table(db, unique_name, 1)
    policy = make_policy(
        unique_name,
        lock_timeout_ms=100,
        remote=remote_fields(
            unique_name, derivatives=[THUMBNAILS], backoff_base_seconds=30, backoff_max_seconds=60
        ),
    )
    enqueue_all(db, policy)
    queue = LeasedQueue(OPERATIONS, policy.name, policy.remote.lease)
    with connect_dsn(test_dsn) as conn, connect_dsn(test_dsn) as other:
        (op,) = [Operation.from_row(row) for row in queue.claim(conn, "worker-a", 1)]
        with other.transaction():
            other.execute(query("ops_lock_objects"), {"keys": [op.object_key]})
            now = time.time()
            done = Finish(state=State.DONE, outcome=Outcome.CONFIRMED, status=204)
            with caplog.at_level("WARNING", logger="retention.objects.finish"):
                AtomicFinish(policy).record(conn, "worker-a", [Attempt(op, done, now, now)], None)
    (warning,) = [r.getMessage() for r in caplog.records if "local delete" in r.getMessage()]
    assert "the wait was for the object's advisory lock" in warning
    assert resources(db, policy, "obj-1")[op.resource]["failure_class"] == "local_delete_pending"


def test_explain_shows_each_tables_rows_waiting_with_the_row_then_those_deleted(
    db, unique_name, sandbox, test_dsn
) -> None:
    """Tables are resources of an object too: while its row waits, explain counts the rows
    of the policy's table and of each listed child still there for the row key (bounded:
    up to a limit, through the foreign key); once the row is gone, the rows its
    retention.deleted event records by table."""
    policy, problems = parse_policy(unique_name, remote_family(db, unique_name))
    assert policy is not None, problems
    enqueue_all(db, policy)
    (match,) = find_operations(db, "obj-1", policy=policy.name, limit=2)
    key, table, renditions = (
        match["operation_key"],
        f"public.{unique_name}",
        f"public.{unique_name}_r",
    )
    policies = {policy.name: policy}
    waiting = explain(db, key, None, policies)["tables"]
    assert (waiting["state"], waiting["source"]) == ("present", "database"), waiting
    assert waiting["counts"] == [
        {"table": table, "rows": 1, "more": False, "not_counted": None},
        {"table": renditions, "rows": 3, "more": False, "not_counted": None},
    ]
    assert waiting["detail"].startswith(f"still there for row {match['row_key']}, waiting with")
    lines = render(explain(db, key, None, policies)).splitlines()
    assert f"    {table}: 1 row(s) still there" in lines
    assert f"    {renditions}: 3 row(s) still there" in lines
    counted = rows_of_key(db, policy, match["row_key"], limit=2)
    assert [one.shown() for one in counted] == ["1", "2+"], "counted up to the limit only"
    assert explain(db, key)["tables"] is None, "without the policy, no tables"

    work(test_dsn, policy, sandbox)
    assert rows_left(db, unique_name) == []
    deleted = explain(db, key, None, policies)["tables"]
    assert (deleted["state"], deleted["source"]) == ("deleted", "event")
    assert deleted["counts"] == [
        {"table": table, "rows": 1, "more": False, "not_counted": None},
        {"table": renditions, "rows": 3, "more": False, "not_counted": None},
    ]
    assert f"    {renditions}: 3 row(s) deleted" in render(explain(db, key, None, policies))
    db.execute("DELETE FROM retention.outbox WHERE policy = %s", (policy.name,))  # purged
    gone = explain(db, key, None, policies)["tables"]
    assert (gone["state"], gone["source"], gone["counts"]) == ("deleted", None, [])
    assert "recorded by table only in a retention.deleted event" in gone["detail"]


def test_explain_shows_a_child_the_catalog_check_refused_as_not_counted_with_why(
    db, unique_name
) -> None:
    """A listed child the check refuses (here a references: the foreign key contradicts) is
    left out of the family: explain shows it as not counted, with the check's words, instead
    of leaving it out silently."""
    fields = remote_family(db, unique_name)
    policy, problems = parse_policy(unique_name, fields)
    assert policy is not None, problems
    enqueue_all(db, policy)
    (match,) = find_operations(db, "obj-1", policy=policy.name, limit=2)
    other = f"{unique_name}_x"
    db.execute(
        f"CREATE TABLE public.{other} (id bigserial PRIMARY KEY, "
        f"asset_id bigint NOT NULL REFERENCES public.{unique_name} (id))"
    )
    wrong = {"table": other, "foreign_key": "asset_id", "references": "version"}
    refused, problems = parse_policy(
        unique_name, {**fields, "children": [*fields["children"], wrong]}
    )
    assert refused is not None, problems
    tables = explain(db, match["operation_key"], None, {refused.name: refused})["tables"]
    assert tables["state"] == "present"
    assert [(c["table"], c["rows"]) for c in tables["counts"]] == [
        (f"public.{unique_name}", 1),
        (f"public.{unique_name}_r", 3),
        (f"public.{other}", None),
    ]
    why = tables["counts"][2]["not_counted"]
    assert f"child public.{other} sets references: version" in why
    lines = render(explain(db, match["operation_key"], None, {refused.name: refused}))
    assert f"    public.{other}: not counted ({why})" in lines.splitlines()


def test_explain_row_says_when_its_tenant_was_not_read(db, unique_name) -> None:
    """A row whose tenant cannot be read (here its tenant_column is not in the table) is
    not described as simply deletable: the record says its tenant holds were not
    checked, and a tenant hold named by the term is "not checked", not "not its tenant"."""
    create_table(db, unique_name, [(42, 7, old())])
    policy = make_policy(unique_name, tenant_column="org_id")
    named = [
        place_hold(
            db, policy=policy.name, match="tenant", value="42", reason="case 15", placed_by="t"
        )
    ]
    record = explain_row(db, policy, 42, named)
    assert record["row"]["state"] == "present"
    assert record["row"]["detail"].startswith(
        f"in public.{unique_name}; a run of the policy deletes it once it is older than the "
        "run's cutoff; tenant not read; tenant holds not checked (column "
    ), record["row"]["detail"]
    assert record["row"]["detail"].endswith(": a hold of its tenant may keep it")
    assert record["holds"] == []
    (also,) = record["also_named"]
    assert also["why_not"].startswith("tenant not read; tenant holds not checked")


def test_explain_counts_within_one_short_deadline_whatever_the_policys_timeouts(
    db, unique_name, test_dsn
) -> None:
    """A person waits for explain: a child table locked by another transaction is "not
    counted (timed out)" within the lookup's deadline, not after the policy's statement_ms
    and lock_timeout_ms (here a minute each); the tables before it are still counted. Two
    locked tables share that one deadline: the lookup is not a deadline per count."""
    fields = remote_family(db, unique_name)
    slow = {**fields, "statement_timeout_ms": 60_000, "lock_timeout_ms": 60_000}
    policy, problems = parse_policy(unique_name, slow)
    assert policy is not None, problems
    enqueue_all(db, policy)
    (match,) = find_operations(db, "obj-1", policy=policy.name, limit=2)
    with connect_dsn(test_dsn) as other, other.transaction():
        other.execute(f"LOCK TABLE public.{unique_name}_r IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        counted = rows_of_key(db, policy, match["row_key"], within_ms=300)
        assert time.monotonic() - started < 5
        assert [one.shown() for one in counted] == ["1", "not counted (timed out)"]
    with connect_dsn(test_dsn) as other, other.transaction():
        other.execute(
            f"LOCK TABLE public.{unique_name}, public.{unique_name}_r IN ACCESS EXCLUSIVE MODE"
        )
        started = time.monotonic()
        counted = rows_of_key(db, policy, match["row_key"], within_ms=1500)
        took = time.monotonic() - started
        assert [one.shown() for one in counted] == ["not counted (timed out)"] * 2
        assert took < 1.5 + 0.9, f"{took:.1f} s: both counts within the one 1.5 s deadline"
        started = time.monotonic()
        tables = explain(db, match["operation_key"], None, {policy.name: policy})["tables"]
        took = time.monotonic() - started
        assert took < 6, f"{took:.1f} s: the whole lookup has at most 5 s"
    assert tables["counts"][1] == {
        "table": f"public.{unique_name}_r",
        "rows": None,
        "more": False,
        "not_counted": "timed out",
    }
