"""The replay guard on a real api-server with the real plugin: creating a ``retention__replay``
run needs the right to trigger the replayed policy's DAG, whatever the auth manager.

The api-server's auth manager is ``PerDagAuthManager`` (``tests/support/auth_managers.py``):
Airflow's simple auth manager, except that only admins may trigger
``retention__guard_secret``, as FAB's per-DAG permissions can say. ``alice`` (role
``user``) may trigger ``retention__replay``, so Airflow alone would let her replay
any policy. No scheduler runs: a created run stays queued, and nothing is replayed.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
import yaml

from devtools.airflow_services import api_server, serialize_replay_dag, service_environment
from tests.support.auth_managers import UNTRIGGERABLE_ENV, PerDagAuthManager
from tests.support.env import ROOT
from tests.support.policies import policy_fields, remote_fields

pytestmark = pytest.mark.scheduler

ADMIN, USER = "ops", "alice"
OPEN, SECRET = "guard_media", "guard_secret"  # alice may trigger retention__guard_media only
RUNS = "/api/v2/dags/retention__replay/dagRuns"


@dataclass
class Served:
    url: str
    tokens: dict[str, str]

    def trigger(self, user: str, conf: dict[str, Any], *, cookie: bool = False) -> Any:
        """``POST /api/v2/dags/retention__replay/dagRuns`` as ``user``: with the bearer token
        as the REST API sends it, or with the login cookie as the UI's trigger form does."""
        run_id = f"guard__{uuid.uuid4().hex[:12]}"
        auth = (
            {"cookies": {"_token": self.tokens[user]}}
            if cookie
            else {"headers": {"Authorization": f"Bearer {self.tokens[user]}"}}
        )
        answer = requests.post(
            f"{self.url}{RUNS}",
            json={"dag_run_id": run_id, "logical_date": None, "conf": conf},
            timeout=30,
            **auth,
        )
        return run_id, answer

    def run(self, run_id: str) -> requests.Response:
        """The run as Airflow stored it (asked as the admin)."""
        return requests.get(
            f"{self.url}{RUNS}/{run_id}",
            headers={"Authorization": f"Bearer {self.tokens[ADMIN]}"},
            timeout=30,
        )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One api-server for the module; retention__replay serialized with two remote policies."""
    home = tmp_path_factory.mktemp("replay_guard")
    policies = home / "policies.yaml"
    fields = {
        name: policy_fields(f"t_{name}", window_per_tenant=False, remote=remote_fields(name))
        for name in (OPEN, SECRET)
    }
    for spec in fields.values():
        spec["schedule"] = None  # manual runs only (policy_fields drops None values)
    policies.write_text(yaml.safe_dump({"policies": fields}))
    passwords = home / "passwords.json"
    env = service_environment(
        RETENTION_POLICIES=str(policies),
        AIRFLOW__CORE__AUTH_MANAGER=f"{PerDagAuthManager.__module__}.PerDagAuthManager",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{ADMIN}:admin,{USER}:user",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
        AIRFLOW__API_AUTH__JWT_SECRET="retention-replay-guard-test-secret",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        **{UNTRIGGERABLE_ENV: f"retention__{SECRET}"},
    )
    serialize_replay_dag(env)
    with api_server(env, home) as url:
        secrets = json.loads(passwords.read_text())
        tokens = {}
        for user in (ADMIN, USER):
            answer = requests.post(
                f"{url}/auth/token",
                json={"username": user, "password": secrets[user]},
                timeout=30,
            )
            answer.raise_for_status()
            tokens[user] = answer.json()["access_token"]
        yield Served(url, tokens)


@pytest.mark.parametrize("cookie", [False, True], ids=["rest-api-token", "ui-login-cookie"])
def test_a_user_who_may_not_trigger_the_policy_is_refused_and_no_run_starts(
    served: Served, cookie: bool
) -> None:
    run_id, answer = served.trigger(USER, {"policy": SECRET, "reason": "x"}, cookie=cookie)
    assert answer.status_code == 403, answer.text
    detail = answer.json()["detail"]
    assert f"policy {SECRET!r}" in detail
    assert f"you may not trigger the DAG 'retention__{SECRET}'" in detail
    assert served.run(run_id).status_code == 404, "no run was created"


def test_a_user_with_the_policys_right_may_replay_it(served: Served) -> None:
    run_id, answer = served.trigger(USER, {"policy": OPEN, "reason": "x"})
    assert answer.status_code == 200, answer.text
    assert served.run(run_id).json()["triggering_user_name"] == USER


def test_an_admin_triggers_and_airflow_gets_the_body_intact(served: Served) -> None:
    conf = {
        "policy": SECRET,
        "kind": "operations",
        "operation_keys": ["a" * 64, "b" * 64],
        "reason": "API outage 30 Nov — replay « all » \u2603",
    }
    run_id, answer = served.trigger(ADMIN, conf)
    assert answer.status_code == 200, answer.text
    stored = served.run(run_id)
    assert stored.status_code == 200, stored.text
    assert stored.json()["conf"] == conf
    assert stored.json()["dag_run_id"] == run_id


def test_requests_without_a_login_are_left_to_airflow(served: Served) -> None:
    answer = requests.post(
        f"{served.url}{RUNS}", json={"logical_date": None, "conf": {"policy": SECRET}}, timeout=30
    )
    assert answer.status_code == 401, answer.text


def test_airflow_lists_the_guard_among_the_plugin_s_middlewares(served: Served) -> None:
    """Admin → Plugins (``GET /api/v2/plugins``) shows the guard, so a deployment can see it."""
    answer = requests.get(
        f"{served.url}/api/v2/plugins",
        headers={"Authorization": f"Bearer {served.tokens[ADMIN]}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    (retention,) = [p for p in answer.json()["plugins"] if p["name"] == "retention"]
    assert retention["fastapi_root_middlewares"] == [
        {
            "name": "Retention replay guard",
            "middleware": "retention.airflow.replay_guard.ReplayGuard",
        }
    ]
