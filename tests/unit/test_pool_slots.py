"""The window pool's slots come from Airflow's pools when a run plans; when those cannot be
read, from ``airflow_settings.yaml``, then from nobody (the rows alone size the plan). The
plan's log says which, and reading them never fails the run."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from retention.airflow.pools import api_pool_slots, pool_slots_now
from retention.airflow.rest import ApiUnreadable
from tests.support.policies import make_policy


def unreadable(pool: str) -> int:
    raise ApiUnreadable("POST /auth/token as 'planner' answered 401: bad credentials")


def broken(pool: str) -> int:
    raise requests.ConnectionError("connection refused")


@pytest.mark.parametrize(
    ("read", "declared", "slots", "logged"),
    [
        (lambda pool: 6, 4, 6, "pool media_api: 6 slots (from Airflow's pools)"),
        (
            unreadable,
            4,
            4,
            "pool media_api: 4 slots (from airflow_settings.yaml: Airflow's pools were not "
            "readable: POST /auth/token as 'planner' answered 401: bad credentials)",
        ),
        (
            broken,
            None,
            None,
            "pool media_api: slots unknown (Airflow's pools were not readable: "
            "ConnectionError: connection refused; airflow_settings.yaml does not declare it): "
            "the rows alone size the plan",
        ),
    ],
    ids=["airflow", "settings-file", "nobody"],
)
def test_the_slots_come_from_airflow_then_the_settings_file_and_the_log_says_which(
    read: Any, declared: int | None, slots: int | None, logged: str
) -> None:
    found = pool_slots_now("media_api", declared, read)
    assert found.slots == slots
    assert str(found) == logged


class Answers:
    """A session that answers each request with the next (status, body) and keeps the calls."""

    def __init__(self, *answers: tuple[int, Any]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def _answer(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        self.calls.append((method, url, kwargs))
        status, body = self.answers.pop(0)
        response = requests.Response()
        response.status_code = status
        response._content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        return response

    def post(self, url: str, **kwargs: Any) -> requests.Response:
        return self._answer("POST", url, **kwargs)

    def get(self, url: str, **kwargs: Any) -> requests.Response:
        return self._answer("GET", url, **kwargs)


def test_the_slots_are_read_with_a_token_of_the_connections_user() -> None:
    session = Answers((201, {"access_token": "jwt"}), (200, {"name": "a b", "slots": 6}))
    slots = api_pool_slots("http://api:8080", "planner", "secret", "a b", session)  # type: ignore[arg-type]
    assert slots == 6
    (login, read) = session.calls
    assert login[:2] == ("POST", "http://api:8080/auth/token")
    assert login[2]["json"] == {"username": "planner", "password": "secret"}
    assert read[:2] == ("GET", "http://api:8080/api/v2/pools/a%20b")
    assert read[2]["headers"] == {"Authorization": "Bearer jwt"}
    assert [call[2]["allow_redirects"] for call in session.calls] == [False, False]


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ([(401, "Invalid credentials")], "POST /auth/token as 'planner' answered 401"),
        ([(201, {"token": "x"})], "answered without an access_token"),
        ([(201, {"access_token": "jwt"}), (404, "not found")], "GET /api/v2/pools/p answered 404"),
        ([(201, {"access_token": "jwt"}), (403, "")], "GET /api/v2/pools/p answered 403"),
        ([(201, {"access_token": "jwt"}), (200, "<html>")], "answered 200 without JSON"),
        ([(201, {"access_token": "jwt"}), (200, {"slots": "6"})], "slots='6', not a whole"),
        ([(201, {"access_token": "jwt"}), (200, {"slots": -1})], "slots=-1: the pool is unlimited"),
    ],
)
def test_an_answer_that_is_not_the_pool_says_what_went_wrong(
    answers: list[tuple[int, Any]], message: str
) -> None:
    with pytest.raises(ApiUnreadable, match=message):
        api_pool_slots("http://api", "planner", "secret", "p", Answers(*answers))  # type: ignore[arg-type]


def test_the_fewest_windows_keep_every_slot_busy() -> None:
    from retention.airflow.dag_factory import fewest_windows

    policy = make_policy("p", pool_slots=2)
    assert [fewest_windows(policy, s) for s in (None, -1, 0, 1, 4, 7)] == [1, 1, 1, 1, 2, 3]


@pytest.mark.parametrize(
    ("conn", "base_url"),
    [
        ({"host": "api.internal", "port": 8080, "schema": "https"}, "https://api.internal:8080"),
        ({"host": "api.internal"}, "http://api.internal"),
        ({"host": "https://airflow.example.com/airflow/"}, "https://airflow.example.com/airflow"),
    ],
)
def test_the_connection_names_the_api_server_and_its_user(
    conn: dict[str, Any], base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from retention.airflow import pools

    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(pools, "api_pool_slots", lambda *args: asked.append(args) or 5)
    monkeypatch.setenv(
        "AIRFLOW_CONN_RETENTION_AIRFLOW_API",
        json.dumps({"conn_type": "http", "login": "planner", "password": "secret", **conn}),
    )
    assert pools.read_pool_slots("media_api") == 5
    assert asked == [(base_url, "planner", "secret", "media_api")]


def test_a_pass_reads_the_pools_occupied_slots_with_one_token() -> None:
    from retention.airflow.pools import PoolStats
    from retention.queue.bound import PoolReading

    pool = {"name": "media_api", "slots": 2, "occupied_slots": 2, "open_slots": 0}
    session = Answers((201, {"access_token": "jwt"}), (200, pool), (200, pool))
    read = PoolStats("http://api:8080", "planner", "secret", session)  # type: ignore[arg-type]
    assert [read("media_api"), read("media_api")] == [PoolReading(slots=2, occupied=2)] * 2
    assert [call[:2] for call in session.calls] == [
        ("POST", "http://api:8080/auth/token"),
        ("GET", "http://api:8080/api/v2/pools/media_api"),
        ("GET", "http://api:8080/api/v2/pools/media_api"),
    ]


def test_an_expired_token_is_asked_for_again_once() -> None:
    from retention.airflow.pools import PoolStats

    pool = {"slots": 4, "occupied_slots": 1}
    session = Answers(
        (201, {"access_token": "old"}),
        (401, "expired"),
        (201, {"access_token": "new"}),
        (200, pool),
    )
    read = PoolStats("http://api", "planner", "secret", session)  # type: ignore[arg-type]
    assert read("p").occupied == 1
    assert session.calls[-1][2]["headers"] == {"Authorization": "Bearer new"}
    refused = Answers((201, {"access_token": "a"}), (401, "no"), (201, {"access_token": "b"}))
    refused.answers.append((401, "still no"))
    with pytest.raises(ApiUnreadable, match="GET /api/v2/pools/p answered 401"):
        PoolStats("http://api", "planner", "secret", refused)("p")  # type: ignore[arg-type]


def test_a_pass_without_the_connection_says_why_the_pool_is_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from retention.airflow.pools import pool_watch

    monkeypatch.delenv("AIRFLOW_CONN_RETENTION_AIRFLOW_API", raising=False)
    watch = pool_watch("media_api", 1)
    watch.sample(0.0)
    assert watch.close(1.0)["pool_unread"] == (
        "no connection 'retention_airflow_api' (the api-server's URL, and a user who may read "
        "pools)"
    )
