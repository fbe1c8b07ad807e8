"""retention.deleted events: transactional outbox, Standard Webhooks signatures, redelivery."""

from __future__ import annotations

import json

import pytest
from svix.webhooks import Webhook as SvixWebhook
from svix.webhooks import WebhookVerificationError

from devtools.receiver import Receiver, new_secret
from retention.db.connection import Connection, connect_dsn
from retention.events.outbox import EventsKind, Signer, deliver_events, event_id_for
from retention.evidence.replay import replay_dead_events
from retention.objects.enqueue import enqueue_window
from retention.queue.http import plain_sender
from tests.support.policies import remote_policy
from tests.support.remote import deliver as deliver_pass
from tests.support.remote import work
from tests.support.tables import count, create_media_table, plan

RECEIVER_CONN = "events_receiver"


def notifying_policy(name: str, **notify):
    spec = {
        "http_conn_id": RECEIVER_CONN,
        "endpoint": "/hooks/retention",
        "timeout_seconds": 2.0,
        "backoff_base_seconds": 0.01,
        "backoff_max_seconds": 0.02,
        **notify,
    }
    return remote_policy(name, notify=spec)


def delete_remotely(db: Connection, test_dsn: str, policy, rows: int, sandbox) -> None:
    create_media_table(db, policy.name, rows)
    for window in plan(db, policy):
        enqueue_window(db, policy, window, 100)
    work(test_dsn, policy, sandbox)


def deliver(test_dsn: str, policy, events_receiver, **kw):
    return deliver_pass(test_dsn, policy, events_receiver, **kw)


def make_due(db: Connection, policy) -> None:
    """Move every pending event's backoff to now, instead of sleeping past it."""
    db.execute(
        "UPDATE retention.outbox SET not_before = now() WHERE policy = %s AND state = 'pending'",
        (policy.name,),
    )


def expire_event_leases(db: Connection, policy) -> None:
    db.execute(
        "UPDATE retention.outbox SET lease_expires_at = now() - interval '1 second' "
        "WHERE policy = %s AND state = 'in_flight'",
        (policy.name,),
    )


def outbox(db: Connection, policy) -> dict[str, int]:
    rows = db.execute(
        "SELECT state, count(*) AS n FROM retention.outbox WHERE policy = %s GROUP BY state",
        (policy.name,),
    )
    return {r["state"]: r["n"] for r in rows}


def test_each_confirmed_deletion_writes_one_event_in_its_transaction(
    db, unique_name, sandbox, test_dsn
) -> None:
    policy = notifying_policy(unique_name)
    delete_remotely(db, test_dsn, policy, 5, sandbox)
    events = db.execute(
        "SELECT o.event_id, o.operation_key, o.payload FROM retention.outbox o "
        "WHERE o.policy = %s ORDER BY o.operation_key",
        (policy.name,),
    ).fetchall()
    done = [
        r["operation_key"]
        for r in db.execute(
            "SELECT operation_key FROM retention.operations WHERE policy = %s AND state = 'done' "
            "ORDER BY operation_key",
            (policy.name,),
        )
    ]
    assert [e["operation_key"] for e in events] == done
    assert len(done) == 5
    for event in events:
        assert event["event_id"] == event_id_for(event["operation_key"])
        payload = json.loads(event["payload"])
        assert payload["type"] == "retention.deleted"
        assert payload["data"]["operation_key"] == event["operation_key"]
        assert payload["data"]["object_id"].startswith("obj-")


def test_an_event_is_written_only_in_the_transaction_that_deletes_its_row(
    db, unique_name, sandbox, test_dsn
) -> None:
    """The batch's finish statement fails (a trigger refuses one row's delete): nothing of
    that statement stays, so no event exists for a row that was not deleted."""
    policy = notifying_policy(unique_name)
    create_media_table(db, policy.name, 4)
    refuse = f"public.{unique_name}_refuse"
    db.execute(
        f"CREATE FUNCTION {refuse}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF OLD.id = 3 THEN RAISE EXCEPTION 'row 3 is on legal hold'; END IF; "
        "RETURN OLD; END $$"
    )
    db.execute(
        f"CREATE TRIGGER refuse BEFORE DELETE ON public.{unique_name} FOR EACH ROW "
        f"EXECUTE FUNCTION {refuse}()"
    )
    for window in plan(db, policy):
        enqueue_window(db, policy, window, 100)
    work(test_dsn, policy, sandbox)  # one claimed batch of 4: its statement fails as a whole
    rows = db.execute(
        "SELECT o.object_id, o.state, o.failure_class, e.event_id IS NOT NULL AS has_event "
        "FROM retention.operations AS o LEFT JOIN retention.outbox AS e USING (operation_key) "
        "WHERE o.policy = %s ORDER BY o.object_id",
        (policy.name,),
    ).fetchall()
    assert [(r["object_id"], r["state"], r["has_event"]) for r in rows] == [
        ("obj-1", "done", True),
        ("obj-2", "done", True),
        ("obj-3", "dead", False),
        ("obj-4", "done", True),
    ]
    assert count(db, "SELECT count(*) FROM retention.outbox WHERE policy = %s", policy.name) == 3
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 1  # noqa: S608


def test_events_are_handed_back_when_time_runs_out(
    db, unique_name, sandbox, events_receiver, test_dsn
) -> None:
    policy = notifying_policy(unique_name, claim_batch=10)
    delete_remotely(db, test_dsn, policy, 6, sandbox)
    events_receiver.latency_seconds = 0.4
    stats = deliver(test_dsn, policy, events_receiver, budget_seconds=1.0)
    assert stats.out_of_time
    assert 1 <= stats.done <= 4
    assert stats.released == 6 - stats.done, "every unsent event went back"
    assert outbox(db, policy) == {"delivered": stats.done, "pending": 6 - stats.done}
    attempts = db.execute(
        "SELECT max(attempts) AS n FROM retention.outbox WHERE policy = %s AND state = 'pending'",
        (policy.name,),
    ).fetchone()
    assert attempts["n"] == 0, "no attempt spent on what was handed back"


def test_signatures_verify_with_an_independent_implementation(
    db, unique_name, sandbox, events_receiver, test_dsn
) -> None:
    policy = notifying_policy(unique_name)
    delete_remotely(db, test_dsn, policy, 3, sandbox)
    stats = deliver(test_dsn, policy, events_receiver)
    assert stats.done == 3
    assert outbox(db, policy) == {"delivered": 3}
    assert len(events_receiver.events) == 3
    verifier = SvixWebhook(events_receiver.secret)
    sent = events_receiver.received[0]
    headers, body = sent["headers"], sent["body"]
    verifier.verify(body, headers)
    assert headers["webhook-signature"].startswith("v1,")
    with pytest.raises(WebhookVerificationError):
        verifier.verify(body.replace(b"obj-", b"obj_"), headers)
    with pytest.raises(WebhookVerificationError):
        verifier.verify(body, {**headers, "webhook-id": "evt_other"})
    stamp = str(int(headers["webhook-timestamp"]) - 1)
    with pytest.raises(WebhookVerificationError):
        verifier.verify(body, {**headers, "webhook-timestamp": stamp})
    with pytest.raises(WebhookVerificationError):
        SvixWebhook(new_secret()).verify(body, headers)


def test_receiver_timeout_leads_to_the_same_event_id_and_bytes(
    db, unique_name, sandbox, events_receiver, test_dsn
) -> None:
    # A backoff of an hour: the retry is never due within the first pass.
    policy = notifying_policy(
        unique_name, timeout_seconds=0.3, backoff_base_seconds=3600, backoff_max_seconds=3600
    )
    delete_remotely(db, test_dsn, policy, 1, sandbox)
    events_receiver.delay_first_seconds = 1.0
    first = deliver(test_dsn, policy, events_receiver)
    assert first.snoozed == 1, "no answer at all and nothing else answered: not this event's fault"
    assert outbox(db, policy) == {"pending": 1}
    make_due(db, policy)
    second = deliver(test_dsn, policy, events_receiver)
    assert second.done == 1
    ids = [r["headers"]["webhook-id"] for r in events_receiver.received]
    bodies = {r["body"] for r in events_receiver.received}
    assert len(ids) == 2
    assert len(set(ids)) == 1
    assert len(bodies) == 1, "redelivery sends the same bytes"
    assert len(events_receiver.events) == 1


def test_crash_between_send_and_record_gives_one_logical_event(
    db, unique_name, sandbox, events_receiver, test_dsn
) -> None:
    policy = notifying_policy(unique_name)
    delete_remotely(db, test_dsn, policy, 1, sandbox)

    class CrashAfterSend(EventsKind):
        def send(self, job):
            super().send(job)
            raise SystemExit("killed after the receiver accepted, before recording")

    kind = CrashAfterSend(
        policy.name,
        policy.notify,
        plain_sender(events_receiver.url, 2),
        Signer(events_receiver.secret, RECEIVER_CONN),
    )
    from retention.queue.worker import Worker

    with connect_dsn(test_dsn) as conn, pytest.raises(SystemExit):
        Worker(conn, kind, budget_seconds=30).run()
    assert outbox(db, policy) == {"in_flight": 1}
    expire_event_leases(db, policy)
    assert deliver(test_dsn, policy, events_receiver).done == 1
    assert len(events_receiver.received) == 2
    assert len({r["headers"]["webhook-id"] for r in events_receiver.received}) == 1
    assert len(events_receiver.events) == 1, "the receiver deduplicates on webhook-id"


def test_gone_disables_the_receiver_and_exhausted_events_are_replayable(
    db, unique_name, sandbox, events_receiver, test_dsn
) -> None:
    policy = notifying_policy(unique_name, max_attempts=2)
    delete_remotely(db, test_dsn, policy, 2, sandbox)
    events_receiver.statuses = [500, 500, 500, 500]
    for _ in range(3):
        deliver(test_dsn, policy, events_receiver)
        make_due(db, policy)  # past the backoff, so each pass retries
    assert outbox(db, policy) == {"dead": 2}
    dead = [
        r["event_id"]
        for r in db.execute(
            "SELECT event_id FROM retention.dead_events WHERE policy = %s", (policy.name,)
        )
    ]
    replayed = replay_dead_events(
        db, policy=policy.name, event_ids=dead[:1], since=None, requested_by="t", reason="fixed"
    )
    assert replayed["event_ids"] == dead[:1]
    assert outbox(db, policy) == {"dead": 1, "pending": 1}
    events_receiver.statuses = [410]
    stats = deliver(test_dsn, policy, events_receiver)
    assert stats.stopped == "endpoint_disabled"
    assert outbox(db, policy) == {"dead": 1, "pending": 1}
    sent = len(events_receiver.received)
    assert deliver(test_dsn, policy, events_receiver).stopped == "endpoint_disabled"
    assert len(events_receiver.received) == sent, "a disabled receiver gets nothing"
    assert (
        count(db, "SELECT count(*) FROM retention.notify_endpoints WHERE policy = %s", policy.name)
        == 1
    )


def explain_key(test_dsn: str, key: str, *extra: str) -> str:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "retention.cli", "--dsn", test_dsn, "explain", key, *extra],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_explain_answers_the_six_questions(
    db, unique_name, sandbox, events_receiver, test_dsn
) -> None:
    from devtools.plans import request
    from retention.evidence.explain import explain
    from retention.evidence.replay import replay_dead
    from retention.rows.planner import plan_windows

    policy = notifying_policy(unique_name)
    create_media_table(db, policy.name, 4)
    sandbox.state.configure(reject=["obj-2"], fail_5xx={"obj-3": 100})
    for window in plan_windows(db, request(policy)):
        enqueue_window(db, policy, window, 100)
    work(test_dsn, policy, sandbox)
    deliver(test_dsn, policy, events_receiver)
    keys = {
        r["object_id"]: r["operation_key"]
        for r in db.execute(
            "SELECT object_id, operation_key FROM retention.operations WHERE policy = %s",
            (policy.name,),
        )
    }

    done = explain(db, keys["obj-1"])
    assert done["selected"]["object_id"] == "obj-1"
    assert done["selected"]["version"] == "1"
    assert (
        "older than the cutoff 2026-03-01T00:00:00+00:00 of run run-1"
        in (done["eligible_because"]["reason"])
    )
    assert done["deletion"]["confirmed"] is True
    ledger = {
        r["object_id"]: r
        for r in db.execute(
            "SELECT object_id, done_at, not_before FROM retention.operations WHERE policy = %s",
            (policy.name,),
        )
    }
    assert done["deletion"]["confirmed_at"] == ledger["obj-1"]["done_at"].isoformat()
    assert done["event"]["event_id"] == event_id_for(keys["obj-1"])
    assert done["event"]["state"] == "delivered"
    assert done["attempts"]["count"] == 1
    assert done["next"]["action"] == "none"

    dead = explain(db, keys["obj-2"])
    assert (dead["deletion"]["state"], dead["event"]) == ("dead", None)
    assert dead["next"]["action"] == "human review"
    assert "http_422" in dead["next"]["detail"]

    pending = explain(db, keys["obj-3"])
    assert pending["deletion"]["state"] == "pending"
    assert pending["next"]["action"] == "automatic retry"
    assert pending["next"]["at"] == ledger["obj-3"]["not_before"].isoformat()
    assert pending["attempts"]["history"][0]["status_code"] == 503

    replay_dead(
        db,
        policy=policy.name,
        operation_keys=[keys["obj-2"]],
        requested_by="ops",
        reason="hold lifted",
    )
    replayed = explain(db, keys["obj-2"])
    assert replayed["deletion"]["state"] == "pending"
    assert replayed["replays"][0]["reason"] == "hold lifted"
    assert replayed["replays"][0]["by"] == "ops"

    text = explain_key(test_dsn, keys["obj-1"])
    assert "selected:   object obj-1" in text
    assert "eligible:" in text
    assert "event:      evt_" in text
    assert json.loads(explain_key(test_dsn, keys["obj-2"], "--json"))["replays"][0]["by"] == "ops"


def test_outbox_leases_are_renewed_while_a_slow_receiver_is_worked(
    db, unique_name, sandbox, events_receiver, test_dsn
) -> None:
    from retention.queue.leased import EVENTS
    from tests.integration.test_remote_ledger import Reclaimer

    policy = notifying_policy(unique_name, timeout_seconds=1.0, lease_seconds=1.2, claim_batch=5)
    delete_remotely(db, test_dsn, policy, 5, sandbox)
    events_receiver.latency_seconds = 0.3  # the batch takes 1.5 s, longer than one lease
    reclaimer = Reclaimer(test_dsn, policy, EVENTS)
    reclaimer.start()
    try:
        stats = deliver(test_dsn, policy, events_receiver)
    finally:
        reclaimer.stop.set()
        reclaimer.join()
    assert reclaimer.tries > 20
    assert reclaimer.taken == [], "no event lease ever expired under the deliverer"
    assert stats.done == 5
    rows = db.execute(
        "SELECT state, claim_count, lease_expiries FROM retention.outbox WHERE policy = %s",
        (policy.name,),
    ).fetchall()
    assert {(r["state"], r["claim_count"], r["lease_expiries"]) for r in rows} == {
        ("delivered", 1, 0)
    }
    assert stats.lost_leases == 0


def test_a_lost_outbox_lease_is_not_worked_further(
    db, unique_name, sandbox, events_receiver, test_dsn
) -> None:
    policy = notifying_policy(unique_name, timeout_seconds=1.0, lease_seconds=1.2, claim_batch=5)
    delete_remotely(db, test_dsn, policy, 2, sandbox)
    kind = EventsKind(
        policy.name,
        policy.notify,
        plain_sender(events_receiver.url, 1),
        Signer(events_receiver.secret, "t"),
    )
    ours = [kind.job(r) for r in kind.queue.claim(db, "slow", 2)]
    expire_event_leases(db, policy)
    theirs = kind.queue.claim(db, "fast", 1)
    assert kind.queue.renew(db, "slow", [e.key for e in ours]) == {e.key for e in ours} - {
        theirs[0]["event_id"]
    }


def test_event_redirects_are_failed_attempts_and_never_followed(
    db, unique_name, sandbox, events_receiver, test_dsn
) -> None:
    elsewhere = Receiver(events_receiver.secret).start()
    try:
        policy = notifying_policy(unique_name, backoff_base_seconds=60, backoff_max_seconds=60)
        delete_remotely(db, test_dsn, policy, 1, sandbox)
        events_receiver.statuses = [307]
        events_receiver.location = elsewhere.url + "/hooks/retention"
        stats = deliver(test_dsn, policy, events_receiver)
        assert (stats.done, stats.retried) == (0, 1)
        assert elsewhere.received == [], "the signed body never left for another host"
        row = db.execute(
            "SELECT state, attempts, last_status_code, failure_class FROM retention.outbox "
            "WHERE policy = %s",
            (policy.name,),
        ).fetchone()
        assert row == {
            "state": "pending",
            "attempts": 1,
            "last_status_code": 307,
            "failure_class": "http_307",
        }
    finally:
        elsewhere.shutdown()
        elsewhere.server_close()


def test_a_receiver_that_asks_to_slow_down_pauses_the_whole_pass(
    db, unique_name, sandbox, events_receiver, test_dsn
) -> None:
    policy = notifying_policy(unique_name)
    delete_remotely(db, test_dsn, policy, 4, sandbox)
    events_receiver.statuses = [200, 429]
    stats = deliver(test_dsn, policy, events_receiver)
    assert stats.stopped == "receiver_rate_limited"
    assert len(events_receiver.received) == 2, "no POST after the 429"
    assert (stats.done, stats.snoozed, stats.released) == (1, 1, 2)
    rows = db.execute(
        "SELECT state, attempts, count(*) AS n FROM retention.outbox WHERE policy = %s "
        "GROUP BY state, attempts ORDER BY state",
        (policy.name,),
    ).fetchall()
    assert [(r["state"], r["attempts"], r["n"]) for r in rows] == [
        ("delivered", 1, 1),
        ("pending", 0, 3),
    ], "the 429 spent no attempt"


def test_the_signing_secret_is_never_sent_to_the_receiver(
    db, unique_name, sandbox, events_receiver, test_dsn, monkeypatch
) -> None:
    """The secret lives in the connection's extra; the HttpHook would turn extras into
    headers and a password with a login into Basic auth: neither carries the secret."""
    import base64

    from retention.airflow.connections import http_sender, signing_secret

    port = events_receiver.server_address[1]
    monkeypatch.setenv(
        "AIRFLOW_CONN_SIGNED_RECEIVER",
        json.dumps(
            {
                "conn_type": "http",
                "host": "127.0.0.1",
                "port": port,
                "login": "retention",
                "password": "receiver-basic-auth",
                "extra": {"signing_secret": events_receiver.secret, "X-Team": "data-platform"},
            }
        ),
    )
    policy = notifying_policy(unique_name, http_conn_id="signed_receiver")
    delete_remotely(db, test_dsn, policy, 2, sandbox)
    secret = signing_secret("signed_receiver")
    assert secret == events_receiver.secret
    sender = http_sender("signed_receiver", 2)
    try:
        with connect_dsn(test_dsn) as conn:
            stats = deliver_events(
                conn, policy.name, policy.notify, sender, Signer(secret, "signed_receiver")
            )
    finally:
        sender.close()
    assert stats.done == 2
    raw_secret = events_receiver.secret.removeprefix("whsec_")
    for request in events_receiver.received:
        headers = request["headers"]
        assert "signing_secret" not in headers
        assert headers["x-team"] == "data-platform", "other extras still become headers"
        basic = base64.b64decode(headers["authorization"].split()[1]).decode()
        assert basic == "retention:receiver-basic-auth"
        assert all(raw_secret not in value for value in headers.values())


def test_a_connection_that_would_send_the_secret_as_a_password_is_refused(monkeypatch) -> None:
    from retention.airflow.connections import signing_secret
    from retention.events.outbox import NotifyConfigError

    secret = new_secret()
    monkeypatch.setenv(
        "AIRFLOW_CONN_LEAKY",
        json.dumps({"conn_type": "http", "host": "h", "login": "me", "password": secret}),
    )
    with pytest.raises(NotifyConfigError, match="would be sent to the receiver as a Basic-auth"):
        signing_secret("leaky")
    monkeypatch.setenv(
        "AIRFLOW_CONN_NO_LOGIN", json.dumps({"conn_type": "http", "host": "h", "password": secret})
    )
    assert signing_secret("no_login") == secret


def test_the_event_lists_every_table_deleted_for_its_key_and_verifies(
    db, unique_name, sandbox, test_dsn, events_receiver
) -> None:
    """A remote policy with a child and a grandchild: the local delete after the API's
    confirmation takes them in the same transaction, and the signed event says so."""
    create_media_table(db, unique_name, 3, new_rows=1)  # ids 1-3 old, 4 young
    renditions, chunks = f"{unique_name}_r", f"{unique_name}_c"
    for statement in (
        f"CREATE TABLE public.{renditions} (id bigserial PRIMARY KEY, "
        f"asset_id bigint NOT NULL REFERENCES public.{unique_name} (id))",
        f"CREATE TABLE public.{chunks} (id bigserial PRIMARY KEY, "
        f"rendition_id bigint NOT NULL REFERENCES public.{renditions} (id))",
        f"INSERT INTO public.{renditions} (asset_id) "  # noqa: S608
        f"SELECT t.id FROM public.{unique_name} AS t, generate_series(1, 2)",
        f"INSERT INTO public.{chunks} (rendition_id) "  # noqa: S608
        f"SELECT r.id FROM public.{renditions} AS r, generate_series(1, 3)",
    ):
        db.execute(statement)
    policy = remote_policy(
        unique_name,
        notify={
            "http_conn_id": RECEIVER_CONN,
            "endpoint": "/hooks/retention",
            "timeout_seconds": 2.0,
        },
        children=[
            {
                "table": renditions,
                "foreign_key": "asset_id",
                "children": [{"table": chunks, "foreign_key": "rendition_id"}],
            }
        ],
    )
    for window in plan(db, policy):
        enqueue_window(db, policy, window, 100)
    work(test_dsn, policy, sandbox)
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 1  # noqa: S608
    left = count(db, f"SELECT count(*) FROM public.{renditions}")  # noqa: S608
    assert left == 2, "only the young asset's renditions are left"
    assert count(db, f"SELECT count(*) FROM public.{chunks}") == 6  # noqa: S608
    deliver(test_dsn, policy, events_receiver)
    assert len(events_receiver.events) == 3, "every event verified with svix"
    for body in events_receiver.events.values():
        assert body["data"]["resources"]["tables"] == {
            f"public.{unique_name}": 1,
            f"public.{renditions}": 2,
            f"public.{chunks}": 6,
        }
