"""Trust at the edges of remote deletion: nothing is confirmed falsely, nothing transient
becomes permanent, an outage spends no attempts (real Postgres, real HTTP on loopback)."""

from __future__ import annotations

import logging
import time

import psycopg
import pytest

from devtools.airflow_services import free_port
from devtools.sandbox_api import SandboxServer
from retention.db.connection import Connection, connect_dsn
from retention.objects.deleter import work_operations
from retention.objects.enqueue import enqueue_window
from retention.objects.kind import EndpointSuspect, OperationsKind
from retention.queue.http import plain_sender
from tests.support.policies import remote_policy
from tests.support.remote import enqueue_all, sandbox_sender
from tests.support.remote import work as work_pass
from tests.support.tables import count, create_media_table, plan


def ops(db: Connection, policy) -> dict[str, dict]:
    rows = db.execute(
        "SELECT object_id, state, failure_class, attempt_count, reason FROM retention.operations "
        "WHERE policy = %s",
        (policy.name,),
    )
    return {r["object_id"]: r for r in rows}


def make_due(db: Connection, policy) -> None:
    db.execute(
        "UPDATE retention.operations SET not_before = now() "
        "WHERE policy = %s AND state = 'pending'",
        (policy.name,),
    )


@pytest.mark.parametrize(
    ("object_id", "tenant", "why"),
    [
        ("..", "3", "the object id is the dot segment '..'"),
        (".", "3", "the object id is the dot segment '.'"),
        ("", "3", "the object id is empty"),
        ("obj\x01", "3", "the object id contains control characters"),
        ("x" * 1025, "3", "the object id is longer than 1024 bytes"),
        ("obj-1", "..", "the tenant is the dot segment '..'"),
        ("obj-1", "", "the tenant is empty"),
    ],
)
def test_ids_that_cannot_be_a_path_segment_are_never_sent(
    db, unique_name, sandbox, test_dsn, object_id: str, tenant: str, why: str
) -> None:
    create_media_table(db, unique_name, 2)
    db.execute(f"ALTER TABLE public.{unique_name} ALTER COLUMN tenant_id TYPE text")
    db.execute(
        f"UPDATE public.{unique_name} SET object_key = %s, tenant_id = %s WHERE id = 1",  # noqa: S608
        (object_id, tenant),
    )
    policy = remote_policy(unique_name, endpoint="/v1/tenants/{tenant_id}/assets/{object_id}")
    enqueue_all(db, policy)
    stats = work_pass(test_dsn, policy, sandbox)
    requests = sandbox.state.stats()["requests"]
    assert [r["path"] for r in requests] == ["/v1/tenants/3/assets/obj-2"], "only the good one"
    bad = db.execute(
        "SELECT state, failure_class, reason, attempt_count FROM retention.operations "
        "WHERE policy = %s AND row_key = 1",
        (policy.name,),
    ).fetchone()
    assert (bad["state"], bad["failure_class"], bad["attempt_count"]) == (
        "dead",
        "invalid_object_id",
        0,
    )
    assert bad["reason"].startswith(why)
    assert count(db, f"SELECT count(*) FROM public.{unique_name} WHERE id = 1") == 1  # noqa: S608
    assert stats.failure_classes["invalid_object_id"] == 1


@pytest.mark.parametrize("object_id", ["//evil.example/x", "@evil.example", "http://evil/x"])
def test_the_host_never_changes(db, unique_name, sandbox, test_dsn, object_id: str) -> None:
    create_media_table(db, unique_name, 1)
    db.execute(f"UPDATE public.{unique_name} SET object_key = %s", (object_id,))  # noqa: S608
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    work_pass(test_dsn, policy, sandbox)
    (request,) = sandbox.state.stats()["requests"]  # it reached the sandbox, nowhere else
    assert request["path"].startswith("/v1/assets/")
    assert request["path"].count("/") == 3, "the id stays one URL-encoded segment"


def test_an_endpoint_that_only_finds_nothing_trips_the_breaker_and_deletes_nothing(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 28)
    for key in (2, 9, 17):  # refused before any call, between the 404s
        db.execute(f"UPDATE public.{unique_name} SET object_key = '' WHERE id = %s", (key,))  # noqa: S608
    sandbox.state.configure(not_found_all=True)
    policy = remote_policy(unique_name, not_found_breaker=20, claim_batch=5)
    enqueue_all(db, policy)
    with pytest.raises(EndpointSuspect, match="endpoint template or connection is probably wrong"):
        work_pass(test_dsn, policy, sandbox)
    assert len(sandbox.state.stats()["requests"]) == 20, "it stopped at the 20th 404"
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 28  # noqa: S608
    states = {
        r["state"] for r in ops(db, policy).values() if r["failure_class"] != "invalid_object_id"
    }
    assert states == {"pending"}, "nothing deleted, nothing dead"
    held = [r for r in ops(db, policy).values() if r["failure_class"] == "not_found_breaker"]
    assert len(held) == 20
    assert all(r["attempt_count"] == 0 for r in held)


def test_404s_count_only_once_the_endpoint_has_answered_2xx(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 3)
    with sandbox.state.lock:
        sandbox.state.deleted.update({"obj-1", "obj-2"})  # already gone: 404
    policy = remote_policy(unique_name, not_found_breaker=20)
    enqueue_all(db, policy)
    first = work_pass(test_dsn, policy, sandbox)
    assert (first.done, first.snoozed) == (1, 2), "the 404s before the first 2xx are held"
    held = ops(db, policy)
    assert (held["obj-1"]["state"], held["obj-1"]["failure_class"]) == (
        "pending",
        "not_found_breaker",
    )
    assert held["obj-1"]["attempt_count"] == 0
    make_due(db, policy)
    second = work_pass(test_dsn, policy, sandbox)  # the 2xx of the first pass verifies it
    assert second.done == 2
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 0  # noqa: S608


def test_a_small_window_of_404s_deletes_nothing_until_the_endpoint_is_proven(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 5)
    db.execute(f"UPDATE public.{unique_name} SET object_key = '..' WHERE id = 1")  # noqa: S608
    sandbox.state.configure(not_found_all=True)
    policy = remote_policy(unique_name, not_found_breaker=20)
    enqueue_all(db, policy)
    stats = work_pass(test_dsn, policy, sandbox)  # 4 answers, all 404: below the breaker
    assert stats.done == 0
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 5, "nothing deleted"  # noqa: S608
    assert stats.failure_classes == {"invalid_object_id": 1, "not_found_breaker": 4}


def test_not_found_is_not_a_deletion_when_the_policy_says_so(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 2)
    with sandbox.state.lock:
        sandbox.state.deleted.add("obj-1")
    policy = remote_policy(unique_name, not_found_is_deleted=False)
    enqueue_all(db, policy)
    work_pass(test_dsn, policy, sandbox)
    found = ops(db, policy)
    assert (found["obj-1"]["state"], found["obj-1"]["failure_class"]) == ("dead", "http_404")
    assert found["obj-2"]["state"] == "done"
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 1  # noqa: S608


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("object_key = 'obj-other'", "now names object 'obj-other'"),
        ("tenant_id = 99", "now belongs to tenant '99'"),
        ("created_at = now()", "no longer older than its window's cutoff"),
        ("version = 2", "is now version 2"),
    ],
)
def test_a_row_that_changed_before_the_call_is_superseded_and_not_called(
    db, unique_name, sandbox, test_dsn, change: str, words: str
) -> None:
    create_media_table(db, unique_name, 2)
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    db.execute(f"UPDATE public.{unique_name} SET {change} WHERE id = 1")  # noqa: S608
    work_pass(test_dsn, policy, sandbox)
    assert [r["object"] for r in sandbox.state.stats()["requests"]] == ["obj-2"]
    row = ops(db, policy)["obj-1"]
    assert (row["state"], row["failure_class"], row["attempt_count"]) == ("dead", "superseded", 0)
    assert words in row["reason"]
    assert count(db, f"SELECT count(*) FROM public.{unique_name} WHERE id = 1") == 1  # noqa: S608


def test_a_row_that_changed_during_the_call_is_left_alone(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 2)
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)

    class RowChangesMidCall(OperationsKind):
        def send(self, job):
            answer = super().send(job)
            if job.object_id == "obj-1":  # the row got a new object while we called
                db.execute(
                    f"UPDATE public.{unique_name} SET object_key = 'obj-new' WHERE id = 1"  # noqa: S608
                )
            return answer

    with connect_dsn(test_dsn) as conn:
        work_operations(conn, RowChangesMidCall(policy, sandbox_sender(sandbox)))
    row = ops(db, policy)["obj-1"]
    assert (row["state"], row["failure_class"]) == ("done", "superseded"), "confirmed, left alone"
    assert "row was left alone" in row["reason"]
    assert count(db, f"SELECT count(*) FROM public.{unique_name} WHERE id = 1") == 1  # noqa: S608
    assert count(db, f"SELECT count(*) FROM public.{unique_name} WHERE id = 2") == 0  # noqa: S608


def test_a_locked_row_keeps_its_confirmation_and_is_deleted_later_without_a_second_call(
    db, unique_name, sandbox, test_dsn, caplog
) -> None:
    create_media_table(db, unique_name, 3)
    policy = remote_policy(unique_name)
    policy = policy.model_copy(update={"lock_timeout_ms": 100})
    enqueue_all(db, policy)
    blocker = psycopg.connect(test_dsn)
    blocker.execute(f"SELECT 1 FROM public.{unique_name} WHERE id = 2 FOR UPDATE")  # noqa: S608
    try:
        with caplog.at_level(logging.WARNING, logger="retention"):
            stats = work_pass(test_dsn, policy, sandbox)
    finally:
        blocker.close()
    found = ops(db, policy)
    assert (found["obj-2"]["state"], found["obj-2"]["failure_class"]) == (
        "pending",
        "local_delete_pending",
    )
    assert found["obj-2"]["attempt_count"] == 1, "the one real call is counted, no more"
    assert "LockNotAvailable" in found["obj-2"]["reason"]
    assert stats.failure_classes["local_delete_pending"] == 1
    assert any("failed for now, retried later" in r.getMessage() for r in caplog.records)
    calls = len(sandbox.state.stats()["requests"])
    make_due(db, policy)
    work_pass(test_dsn, policy, sandbox)
    assert ops(db, policy)["obj-2"]["state"] == "done"
    assert len(sandbox.state.stats()["requests"]) == calls, "no second call to the API"
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 0  # noqa: S608


def test_an_api_outage_spends_no_attempts_and_pauses_once_per_pause(
    db, unique_name, test_dsn, caplog
) -> None:
    create_media_table(db, unique_name, 30)
    policy = remote_policy(unique_name, max_attempts=2)
    enqueue_all(db, policy)
    down = plain_sender(f"http://127.0.0.1:{free_port()}", 1)  # nothing listens: refused
    started = time.monotonic()
    with connect_dsn(test_dsn) as conn, caplog.at_level(logging.WARNING, logger="retention"):
        stats = work_operations(conn, OperationsKind(policy, down), budget_seconds=4)
    assert time.monotonic() - started < 8
    assert stats.out_of_time
    assert stats.outage_pauses >= 2
    pauses = [r for r in caplog.records if "pausing the scope" in r.getMessage()]
    assert len(pauses) == stats.outage_pauses, "one log line per pause, not per object"
    rows = ops(db, policy).values()
    assert {r["state"] for r in rows} == {"pending"}
    assert max(r["attempt_count"] for r in rows) == 0, "an outage spends no attempt"


def test_a_timeout_of_one_object_among_answers_spends_its_attempt(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 4)
    sandbox.state.configure(drop_after_apply=["obj-3"])  # no answer for obj-3 alone
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    stats = work_pass(test_dsn, policy, sandbox)
    assert stats.outage_pauses == 0
    row = ops(db, policy)["obj-3"]
    assert (row["state"], row["attempt_count"]) == ("pending", 1)


def test_an_unreachable_receiver_pauses_delivery_without_spending_attempts(
    db, unique_name, sandbox, test_dsn
) -> None:
    from devtools.receiver import new_secret
    from retention.events.outbox import Signer, deliver_events

    notify = {"http_conn_id": "x", "endpoint": "/e", "timeout_seconds": 1}
    policy = remote_policy(unique_name, notify=notify)
    create_media_table(db, unique_name, 3)
    for window in plan(db, policy):
        enqueue_window(db, policy, window, 100)
    work_pass(test_dsn, policy, sandbox)
    down = plain_sender(f"http://127.0.0.1:{free_port()}", 1)
    with connect_dsn(test_dsn) as conn:
        stats = deliver_events(
            conn, policy.name, policy.notify, down, Signer(new_secret(), "x"), budget_seconds=5
        )
    assert stats.stopped == "unreachable"
    rows = db.execute(
        "SELECT state, attempts FROM retention.outbox WHERE policy = %s", (policy.name,)
    ).fetchall()
    assert {(r["state"], r["attempts"]) for r in rows} == {("pending", 0)}


def test_an_outage_of_a_real_server_that_comes_back(db, unique_name, test_dsn) -> None:
    """The sandbox stops mid-backlog, then comes back on the same port: nothing is lost."""
    create_media_table(db, unique_name, 6)
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    server = SandboxServer(0).start()
    port = server.server_address[1]
    server.stop()
    work_pass(test_dsn, policy, server, budget_seconds=2)
    assert {r["attempt_count"] for r in ops(db, policy).values()} == {0}
    again = SandboxServer(port).start()
    try:
        make_due(db, policy)
        db.execute(
            "UPDATE retention.rate_limiters SET closed_until = now() WHERE scope = %s",
            (policy.remote.scope,),
        )
        work_pass(test_dsn, policy, again)
    finally:
        again.stop()
    assert {r["state"] for r in ops(db, policy).values()} == {"done"}
    assert set(again.state.stats()["effects"].values()) == {1}


def test_an_outage_after_answers_spends_no_attempts(db, unique_name, test_dsn) -> None:
    """The API answers, then goes down: the calls without an answer spend nothing."""
    create_media_table(db, unique_name, 10)
    policy = remote_policy(unique_name, claim_batch=10)
    enqueue_all(db, policy)
    server = SandboxServer(0).start()

    class GoesDownAfterThree(OperationsKind):
        calls = 0

        def send(self, job):
            GoesDownAfterThree.calls += 1
            if GoesDownAfterThree.calls == 4:
                server.stop()
                self.sender.session.close()  # no kept-alive connection to the old server
            return super().send(job)

    with connect_dsn(test_dsn) as conn:
        stats = work_operations(
            conn, GoesDownAfterThree(policy, sandbox_sender(server, 0.5)), budget_seconds=3
        )
    rows = ops(db, policy)
    assert stats.done == 3
    assert stats.outage_pauses >= 1
    assert {r["attempt_count"] for r in rows.values() if r["state"] == "pending"} == {0}


def test_a_window_whose_cutoff_lies_in_the_future_never_makes_a_young_row_eligible(
    db, unique_name, sandbox, test_dsn
) -> None:
    """A window planned by a release without the cutoff rule (or a hand-edited ledger) has a
    cutoff 20 days ahead: its young row's object is not called, the old one still is."""
    create_media_table(db, unique_name, 2)
    policy = remote_policy(unique_name)  # retain_days 30
    enqueue_all(db, policy)
    db.execute(
        "UPDATE retention.windows SET cutoff = now() + interval '20 days' WHERE policy = %s",
        (policy.name,),
    )
    db.execute(
        f"UPDATE public.{unique_name} SET created_at = now() - interval '10 days' WHERE id = 1"  # noqa: S608
    )
    work_pass(test_dsn, policy, sandbox)
    assert [r["object"] for r in sandbox.state.stats()["requests"]] == ["obj-2"]
    row = ops(db, policy)["obj-1"]
    assert (row["state"], row["failure_class"], row["attempt_count"]) == ("dead", "superseded", 0)
    assert count(db, f"SELECT count(*) FROM public.{unique_name} WHERE id = 1") == 1  # noqa: S608
