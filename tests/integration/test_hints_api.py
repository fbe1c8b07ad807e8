"""The plugin's HTTP API on a real loopback server: signed hints and evidence."""

from __future__ import annotations

import datetime as dt
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import uvicorn
import yaml
from standardwebhooks.webhooks import Webhook

from devtools.airflow_services import wait_for
from devtools.receiver import new_secret
from retention.airflow.api import create_app
from retention.events.hints import MAX_BODY_BYTES
from retention.objects.keys import operation_key
from tests.support.policies import HTTP_CONN_ID, policy_fields, remote_policy
from tests.support.remote import work
from tests.support.tables import count, create_media_table

TODAY = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.fixture
def api(db, unique_name, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """uvicorn serving the plugin app on loopback, with one remote policy and a hint secret."""
    create_media_table(db, unique_name, 5, new_rows=5)
    fields = policy_fields(unique_name, window_per_tenant=False)
    fields["remote"] = {
        "http_conn_id": HTTP_CONN_ID,
        "endpoint": "/v1/assets/{object_id}",
        "object_id_column": "object_key",
        "version_column": "version",
        "rate_per_second": 100,
        "burst": 10,
        "limiter_scope": unique_name,
        "pool": "default_pool",
    }
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({"policies": {unique_name: fields}}))
    monkeypatch.setenv("RETENTION_POLICIES", str(path))
    secret = new_secret()
    monkeypatch.setenv(
        "AIRFLOW_CONN_RETENTION_HINTS", json.dumps({"conn_type": "generic", "password": secret})
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound before the server starts: no race for the port
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(airflow_auth=False), log_level="error"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30, "the hints API starting", step=0.02)
    yield {"url": f"http://127.0.0.1:{port}", "secret": secret, "policy": unique_name}
    server.should_exit = True
    thread.join(10)
    sock.close()


def post_hint(api: dict, body: dict | bytes, *, msg_id: str = "", age: float = 0, secret=None):
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    when = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=age)
    signature = Webhook(secret or api["secret"]).sign(msg_id, when, data.decode())
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }
    return requests.post(f"{api['url']}/hints", data=data, headers=headers, timeout=10)


def written(db, policy: str) -> tuple[int, int]:
    ops = count(db, "SELECT count(*) FROM retention.operations WHERE policy = %s", policy)
    receipts = count(db, "SELECT count(*) FROM retention.hint_receipts WHERE policy = %s", policy)
    return ops, receipts


def test_signed_hint_makes_objects_pending_under_the_scan_keys(db, api, sandbox, test_dsn) -> None:
    policy = api["policy"]
    due = (TODAY - dt.timedelta(hours=1)).isoformat()  # already due: the drain takes it
    first_id = f"msg_{uuid.uuid4().hex}"
    objects = [{"key": "obj-2"}, {"key": "obj-8", "due_at": due}]
    answer = post_hint(api, {"policy": policy, "objects": objects}, msg_id=first_id)
    assert answer.status_code == 202, answer.text
    table = f"public.{policy}"
    expected = sorted(operation_key(policy, 1, table, n, "1") for n in (2, 8))
    assert answer.json()["operations"] == expected
    rows = db.execute(
        "SELECT object_id, state, not_before, window_key FROM retention.operations "
        "WHERE policy = %s ORDER BY object_id",
        (policy,),
    ).fetchall()
    assert [(r["object_id"], r["state"], r["window_key"]) for r in rows] == [
        ("obj-2", "pending", None),
        ("obj-8", "pending", None),
    ]
    assert rows[1]["not_before"] == dt.datetime.fromisoformat(due)
    assert sandbox.state.stats()["requests"] == [], "the hint path never calls the API"

    again = post_hint(api, {"policy": policy, "objects": [{"key": "obj-3"}]}, msg_id=first_id)
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert written(db, policy) == (2, 1), "a repeated webhook-id changes nothing"

    spec = remote_policy(policy)  # the drain step deletes hinted objects, even newer ones
    work(test_dsn, spec, sandbox)
    assert sorted(sandbox.state.stats()["effects"]) == ["obj-2", "obj-8"]
    assert count(db, f"SELECT count(*) FROM {table}") == 8  # noqa: S608


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("bad_signature", 401),
        ("stale", 401),
        ("unknown_policy", 422),
        ("unknown_object", 422),
        ("bad_body", 422),
        ("too_many", 413),
        ("oversized", 413),
    ],
)
def test_refused_hints_write_nothing(db, api, case: str, status: int) -> None:
    policy = api["policy"]
    good = {"policy": policy, "objects": [{"key": "obj-1"}]}
    answer = {
        "bad_signature": lambda: post_hint(api, good, secret=new_secret()),
        "stale": lambda: post_hint(api, good, age=6 * 60),
        "unknown_policy": lambda: post_hint(api, {**good, "policy": "nope"}),
        "unknown_object": lambda: post_hint(
            api, {"policy": policy, "objects": [{"key": "obj-1"}, {"key": "missing"}]}
        ),
        "bad_body": lambda: post_hint(api, {"policy": policy, "objects": [{"id": 1}]}),
        "too_many": lambda: post_hint(
            api, {"policy": policy, "objects": [{"key": f"obj-{i}"} for i in range(1001)]}
        ),
        "oversized": lambda: post_hint(api, b" " * (MAX_BODY_BYTES + 1) + b"{}"),
    }[case]()
    assert answer.status_code == status, answer.text
    assert written(db, policy) == (0, 0)


def test_evidence_endpoint(db, api, sandbox, test_dsn) -> None:
    policy = api["policy"]
    assert post_hint(api, {"policy": policy, "objects": [{"key": "obj-1"}]}).status_code == 202
    key = operation_key(policy, 1, f"public.{policy}", 1, "1")
    response = requests.get(f"{api['url']}/operations/{key}", timeout=10)
    assert response.status_code == 200, response.text
    record = response.json()
    assert record["selected"]["object_id"] == "obj-1"
    assert record["next"]["action"] == "automatic retry"
    assert record["eligible_because"]["reason"] == "enqueued outside a recorded window"
    missing = requests.get(f"{api['url']}/operations/{'0' * 64}", timeout=10)
    assert missing.status_code == 404


def test_a_key_named_twice_is_one_operation_due_at_the_earliest(db, api) -> None:
    policy = api["policy"]
    early = (TODAY + dt.timedelta(hours=1)).isoformat()
    late = (TODAY + dt.timedelta(days=30)).isoformat()
    objects = [{"key": "obj-4", "due_at": late}, {"key": "obj-4", "due_at": early}]
    answer = post_hint(api, {"policy": policy, "objects": objects})
    assert answer.status_code == 202, answer.text
    assert len(answer.json()["operations"]) == 1
    row = db.execute(
        "SELECT not_before FROM retention.operations WHERE policy = %s", (policy,)
    ).fetchone()
    assert row["not_before"] == dt.datetime.fromisoformat(early)


def signed_headers(api: dict, data: bytes, *, signature: str | None = None) -> dict[str, str]:
    msg_id = f"msg_{uuid.uuid4().hex}"
    when = dt.datetime.now(dt.UTC)
    if signature is None:
        signature = Webhook(api["secret"]).sign(msg_id, when, data.decode("utf-8", "replace"))
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }


@pytest.mark.parametrize(
    ("case", "signature"),
    [
        ("no comma", "v1"),
        ("three parts", "v1,abc,def"),
        ("not base64", "v1,!!!!"),
        ("empty", ""),
    ],
)
def test_any_malformed_signature_is_a_401(db, api, case: str, signature: str) -> None:
    data = json.dumps({"policy": api["policy"], "objects": [{"key": "obj-1"}]}).encode()
    answer = requests.post(
        f"{api['url']}/hints",
        data=data,
        headers=signed_headers(api, data, signature=signature),
        timeout=10,
    )
    assert answer.status_code == 401, (case, answer.text)
    assert written(db, api["policy"]) == (0, 0)


def test_a_body_that_is_not_utf8_is_a_401_not_a_500(db, api) -> None:
    data = b'{"policy": "\xff\xfe"}'
    answer = requests.post(
        f"{api['url']}/hints", data=data, headers=signed_headers(api, data), timeout=10
    )
    assert answer.status_code == 401, answer.text
    assert written(db, api["policy"]) == (0, 0)


@pytest.mark.parametrize(
    ("objects", "words"),
    [
        ([{"key": "obj-1\u0000"}], "NUL characters are not allowed"),
        ([{"key": "obj-1", "due_at": "2026-12-01T00:00:00+05:30:30"}], "whole minutes"),
        ([{"key": "obj-1", "due_at": "2026-12-01T00:00:00+15:00"}], "within ±14:00"),
        ([{"key": "obj-1", "due_at": "2026-12-01T00:00:00"}], "needs a time zone"),
        ([{"key": "obj-1", "due_at": "tomorrow"}], "is not ISO 8601"),
    ],
)
def test_hostile_payloads_are_a_422_that_names_the_problem(db, api, objects, words) -> None:
    answer = post_hint(api, {"policy": api["policy"], "objects": objects})
    assert answer.status_code == 422, answer.text
    assert words in answer.json()["detail"]
    assert written(db, api["policy"]) == (0, 0)


def test_json_nested_too_deep_is_a_422(db, api) -> None:
    deep: object = "x"
    for _ in range(40):
        deep = [deep]
    answer = post_hint(api, {"policy": api["policy"], "objects": [{"key": "obj-1"}], "x": deep})
    assert answer.status_code == 422
    assert "nested deeper than 32 levels" in answer.json()["detail"]
    very_deep = b"[" * 100_000 + b"]" * 100_000
    answer = post_hint(api, very_deep)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith("body is not JSON")
    assert written(db, api["policy"]) == (0, 0)


@pytest.mark.parametrize("key", ["%00", "abc", "0" * 63, "Z" * 64, "../etc"])
def test_evidence_keys_that_are_not_operation_keys_are_404(api, key: str) -> None:
    answer = requests.get(f"{api['url']}/operations/{key}", timeout=10)
    assert answer.status_code == 404, answer.text


def test_evidence_needs_the_permission_to_read_the_policy_dag(
    db, api, tmp_path, monkeypatch
) -> None:
    """The auth manager's DAG permission decides (stood in for here, without Airflow); a
    key the user may not read is answered as an unknown one (404, the same text)."""
    policy = api["policy"]
    assert post_hint(api, {"policy": policy, "objects": [{"key": "obj-1"}]}).status_code == 202
    key = operation_key(policy, 1, f"public.{policy}", 1, "1")
    asked: list[str] = []

    def deny(user, dag_id: str) -> bool:
        asked.append(dag_id)
        return False

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(create_app(airflow_auth=False, authorize=deny), log_level="error")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30, "the app starting", step=0.02)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/operations/{key}"
        answer = requests.get(url, timeout=10)
        unknown = requests.get(url.replace(key, "0" * 64), timeout=10)
        assert (answer.status_code, unknown.status_code) == (404, 404)
        assert answer.json()["detail"].replace(key, "K") == unknown.json()["detail"].replace(
            "0" * 64, "K"
        )
        assert f"retention__{policy}" in asked
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_a_hint_never_shortens_retention(db, api, sandbox, test_dsn) -> None:
    """An object whose row is younger than retain_days is refused (422, nothing written),
    and a hinted operation already in the ledger for such a row is never called."""
    policy = api["policy"]  # retain_days 30
    db.execute(
        f"UPDATE public.{policy} SET created_at = now() - interval '10 days' WHERE id = 3"  # noqa: S608
    )
    answer = post_hint(api, {"policy": policy, "objects": [{"key": "obj-2"}, {"key": "obj-3"}]})
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert "not yet older than retain_days (30 days)" in detail
    assert "['obj-3']" in detail
    assert written(db, policy) == (0, 0), "nothing written, not even the old object's operation"

    # A hinted operation enqueued before this rule (or by hand) for the young row.
    spec = remote_policy(policy)
    db.execute(
        "INSERT INTO retention.operations (operation_key, policy, policy_revision, table_name, "
        "row_key, object_id, tenant, version, window_key, state, not_before) "
        "VALUES (%s, %s, 1, %s, 3, 'obj-3', '1', 1, NULL, 'pending', now())",
        (operation_key(policy, 1, f"public.{policy}", 3, "1"), policy, f"public.{policy}"),
    )
    work(test_dsn, spec, sandbox)
    assert sandbox.state.stats()["requests"] == [], "a young row's object is never called"
    row = db.execute(
        "SELECT state, failure_class, attempt_count FROM retention.operations WHERE policy = %s",
        (policy,),
    ).fetchone()
    assert (row["state"], row["failure_class"], row["attempt_count"]) == ("dead", "superseded", 0)
    assert count(db, f"SELECT count(*) FROM public.{policy} WHERE id = 3") == 1  # noqa: S608
