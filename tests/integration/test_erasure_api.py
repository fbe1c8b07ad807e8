"""Erasures through the plugin's JSON API and urgent hints, on a real loopback server."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import uvicorn
import yaml

from devtools.airflow_services import wait_for
from devtools.receiver import new_secret
from retention.airflow.api import create_app
from tests.integration.test_hints_api import post_hint
from tests.support.policies import policy_fields, remote_fields
from tests.support.tables import count, create_media_table

ALLOWED = "may-erase"  # the stand-in user who may trigger the policy's DAG


@pytest.fixture
def api(db, unique_name, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    create_media_table(db, unique_name, 6)
    fields = policy_fields(unique_name, window_per_tenant=False)
    fields["remote"] = remote_fields(unique_name)
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({"policies": {unique_name: fields}}))
    monkeypatch.setenv("RETENTION_POLICIES", str(path))
    secret = new_secret()
    monkeypatch.setenv(
        "AIRFLOW_CONN_RETENTION_HINTS", json.dumps({"conn_type": "generic", "password": secret})
    )
    triggered: list[str] = []
    user = {"name": ALLOWED}

    def start(_user, note: str) -> str:
        triggered.append(note)
        return f"manual__{len(triggered)}"

    app = create_app(
        airflow_auth=False,
        may_trigger=lambda _u, _dag: user["name"] == ALLOWED,
        start_erasures=start,
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="error"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30, "the API starting", step=0.02)
    yield {
        "url": f"http://127.0.0.1:{port}",
        "secret": secret,
        "policy": unique_name,
        "triggered": triggered,
        "user": user,
    }
    server.should_exit = True
    thread.join(10)
    sock.close()


# a database that does not answer: nothing listens on port 1 (the password must never show)
DOWN_CONN_ID = "retention_down"
DOWN_PASSWORD = "not-to-be-shown"
DOWN = {"conn_type": "postgres", "host": "127.0.0.1", "port": 1, "login": "postgres"}


# a policy whose postgres_conn_id names no Airflow connection at all
UNDEFINED_CONN_ID = "retention_undefined"


def add_policy_on_a_database_that_is_down(
    api, monkeypatch: pytest.MonkeyPatch, conn_id: str = DOWN_CONN_ID
) -> None:
    """A second policy, readable by the user, whose database does not answer: nothing
    listens (``DOWN_CONN_ID``), or Airflow has no such connection (``UNDEFINED_CONN_ID``)."""
    if conn_id == DOWN_CONN_ID:
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{DOWN_CONN_ID.upper()}", json.dumps({**DOWN, "password": DOWN_PASSWORD})
        )
    else:
        monkeypatch.delenv(f"AIRFLOW_CONN_{conn_id.upper()}", raising=False)
    path = Path(os.environ["RETENTION_POLICIES"])
    policies = yaml.safe_load(path.read_text())
    down = f"{api['policy']}_down"
    policies["policies"][down] = policy_fields(down, postgres_conn_id=conn_id)
    path.write_text(yaml.safe_dump(policies))


def erasures_of(db, policy: str) -> int:
    return count(db, "SELECT count(*) FROM retention.erasures WHERE policy = %s", policy)


def test_an_erasure_requested_through_the_api_is_recorded_once_and_started(db, api) -> None:
    body = {"policy": api["policy"], "tenant": "2", "reason": "ticket 77", "request_key": "r-1"}
    first = requests.post(f"{api['url']}/erasures", json=body, timeout=10)
    assert first.status_code == 201, first.text
    assert first.json()["state"] == "requested"
    assert first.json()["triggered"] == "manual__1"
    again = requests.post(f"{api['url']}/erasures", json=body, timeout=10)
    assert again.status_code == 200
    assert again.json()["erasure_id"] == first.json()["erasure_id"]
    assert api["triggered"] == [f"erasure {first.json()['erasure_id']}"]
    shown = requests.get(f"{api['url']}/erasures/{first.json()['erasure_id']}", timeout=10)
    assert shown.status_code == 200
    assert shown.json()["deadline"]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"tenant": "2", "reason": ""}, 422, "the reason is empty"),
        ({"tenant": "2", "reason": "x", "deadline": "2020-01-01T00:00:00+00:00"}, 422, "past"),
        ({"tenant": "2", "key": "3", "reason": "x"}, 422, "exactly one of"),
        ({"policy": "no_such_policy", "tenant": "2", "reason": "x"}, 422, "unknown policy"),
    ],
)
def test_bad_erasure_requests_are_refused_and_write_nothing(db, api, body, status, says) -> None:
    answer = requests.post(
        f"{api['url']}/erasures", json={"policy": api["policy"], **body}, timeout=10
    )
    assert answer.status_code == status
    assert says in answer.json()["detail"]
    assert erasures_of(db, api["policy"]) == 0
    assert api["triggered"] == []


def test_requesting_an_erasure_needs_the_right_to_trigger_the_policys_dag(db, api) -> None:
    api["user"]["name"] = "reader-only"
    body = {"policy": api["policy"], "tenant": "2", "reason": "ticket 78"}
    answer = requests.post(f"{api['url']}/erasures", json=body, timeout=10)
    assert answer.status_code == 403
    assert f"retention__{api['policy']}" in answer.json()["detail"]
    assert erasures_of(db, api["policy"]) == 0


def test_an_urgent_hint_requests_one_erasure_per_object_once(db, api) -> None:
    body = {
        "policy": api["policy"],
        "priority": "urgent",
        "reason": "data subject request 5",
        "objects": [{"key": "obj-1"}, {"key": "obj-2"}],
    }
    first = post_hint(api, body, msg_id="msg_urgent_1")
    assert first.status_code == 202, first.text
    assert len(first.json()["erasures"]) == 2
    again = post_hint(api, body, msg_id="msg_urgent_1")
    assert again.status_code == 200
    assert again.json()["erasures"] == first.json()["erasures"]
    assert erasures_of(db, api["policy"]) == 2
    assert len(api["triggered"]) == 1


def test_an_urgent_hint_without_a_reason_is_refused(db, api) -> None:
    body = {"policy": api["policy"], "priority": "urgent", "objects": [{"key": "obj-1"}]}
    answer = post_hint(api, body)
    assert answer.status_code == 422
    assert "'reason' must say why" in answer.json()["detail"]
    assert erasures_of(db, api["policy"]) == 0


def test_an_erasure_request_that_is_not_json_is_refused(db, api) -> None:
    """A cross-site page can post a form or text/plain, never application/json without a
    preflight: an erasure (it deletes whatever the age) is only taken as JSON."""
    body = json.dumps({"policy": api["policy"], "tenant": "2", "reason": "ticket 79"})
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        answer = requests.post(
            f"{api['url']}/erasures",
            data=body,
            headers={"Content-Type": content_type},
            timeout=10,
        )
        assert answer.status_code == 415, content_type
    assert erasures_of(db, api["policy"]) == 0


def test_a_request_key_reused_for_another_request_is_a_conflict(db, api) -> None:
    """The same key with another body is not the same request: answering 200 with the
    earlier erasure would tell the caller this one was recorded."""
    key = f"r-{api['policy']}"
    body = {"policy": api["policy"], "tenant": "2", "reason": "ticket 79", "request_key": key}
    first = requests.post(f"{api['url']}/erasures", json=body, timeout=10)
    assert first.status_code == 201, first.text
    other = requests.post(f"{api['url']}/erasures", json={**body, "tenant": "3"}, timeout=10)
    assert other.status_code == 409, other.text
    assert f"already names erasure {first.json()['erasure_id']}" in other.json()["detail"]
    assert "differs in value" in other.json()["detail"]
    assert erasures_of(db, api["policy"]) == 1
    assert api["triggered"] == [f"erasure {first.json()['erasure_id']}"]


def test_an_erasure_read_through_the_api_says_how_many_passes_it_took(db, api) -> None:
    body = {"policy": api["policy"], "key": "3", "reason": "ticket 80"}
    made = requests.post(f"{api['url']}/erasures", json=body, timeout=10)
    assert made.status_code == 201, made.text
    assert made.json()["passes"] == 0
    db.execute(
        "UPDATE retention.erasures SET passes = passes + 2 WHERE erasure_id = %s",
        (made.json()["erasure_id"],),
    )  # two passes of the erasure DAG, as erasure_start.sql counts them
    shown = requests.get(f"{api['url']}/erasures/{made.json()['erasure_id']}", timeout=10)
    assert shown.json()["passes"] == 2


def test_a_request_key_cannot_take_the_key_an_urgent_hint_will_use(db, api) -> None:
    """An urgent hint keys its erasures hint:<webhook-id>:<object>; a caller who took such a
    key first would have the hint answered with the caller's erasure, or refused."""
    squatted = {
        "policy": api["policy"],
        "object": "obj-1",
        "reason": "not the hint's reason",
        "request_key": "hint:msg_squatted:obj-1",
    }
    taken = requests.post(f"{api['url']}/erasures", json=squatted, timeout=10)
    assert taken.status_code == 422, taken.text
    assert "starts with 'hint:', which only urgent hints' keys do" in taken.json()["detail"]
    assert erasures_of(db, api["policy"]) == 0
    hint = {
        "policy": api["policy"],
        "priority": "urgent",
        "reason": "data subject request 6",
        "objects": [{"key": "obj-1"}],
    }
    answer = post_hint(api, hint, msg_id="msg_squatted")
    assert answer.status_code == 202, answer.text
    (erasure_id,) = answer.json()["erasures"]
    row = db.execute(
        "SELECT request_key, reason FROM retention.erasures WHERE erasure_id = %s", (erasure_id,)
    ).fetchone()
    assert (row["request_key"], row["reason"]) == (
        "hint:msg_squatted:obj-1",
        "data subject request 6",
    )


@pytest.mark.parametrize("conn_id", [DOWN_CONN_ID, UNDEFINED_CONN_ID])
def test_an_erasure_not_found_while_a_readable_database_is_down_is_a_503(
    db, api, monkeypatch: pytest.MonkeyPatch, conn_id: str
) -> None:
    """The answer policy of every lookup (retention.airflow.lookup): not found in the
    databases that answered, and one of a readable policy did not (nothing listens, or
    Airflow has no such connection), is a 503 naming that connection (not 404, which would
    say the erasure does not exist), and nothing secret: no password, no host, no driver
    error."""
    add_policy_on_a_database_that_is_down(api, monkeypatch, conn_id)
    answer = requests.get(f"{api['url']}/erasures/987654321", timeout=30)
    assert answer.status_code == 503, answer.text
    detail = answer.json()["detail"]
    assert conn_id in detail
    for secret in (DOWN_PASSWORD, "127.0.0.1", "port 1", "refused"):
        assert secret not in detail


@pytest.mark.parametrize("conn_id", [DOWN_CONN_ID, UNDEFINED_CONN_ID])
def test_an_erasure_on_a_database_that_answers_is_found_while_another_is_down(
    db, api, monkeypatch: pytest.MonkeyPatch, conn_id: str
) -> None:
    body = {"policy": api["policy"], "tenant": "2", "reason": "ticket 81"}
    made = requests.post(f"{api['url']}/erasures", json=body, timeout=10)
    assert made.status_code == 201, made.text
    add_policy_on_a_database_that_is_down(api, monkeypatch, conn_id)
    shown = requests.get(f"{api['url']}/erasures/{made.json()['erasure_id']}", timeout=30)
    assert shown.status_code == 200, shown.text
    assert shown.json()["policy"] == api["policy"]


def test_an_unknown_erasure_is_a_404_when_every_database_answers(db, api) -> None:
    answer = requests.get(f"{api['url']}/erasures/987654321", timeout=10)
    assert answer.status_code == 404
    assert answer.json()["detail"] == "no erasure 987654321 of a policy you may read"
