"""The plugin's API mounted by the real retention plugin on a real api-server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from devtools.airflow_services import api_server, service_environment
from retention.objects.enqueue import enqueue_window
from retention.objects.keys import operation_key
from tests.support.policies import policy_fields, remote_fields, remote_policy
from tests.support.tables import create_media_table, plan

pytestmark = pytest.mark.scheduler

USER = "ops"


@pytest.fixture
def served(db, unique_name: str, tmp_path: Path) -> Iterator[dict]:
    """An api-server with this test's policies, and a user that may log in."""
    create_media_table(db, unique_name, 3)
    policy = remote_policy(unique_name)
    for window in plan(db, policy):
        enqueue_window(db, policy, window, 100)
    policies = tmp_path / "policies.yaml"
    fields = policy_fields(unique_name, window_per_tenant=False, remote=remote_fields(unique_name))
    policies.write_text(yaml.safe_dump({"policies": {unique_name: fields}}))
    home = tmp_path / "home"
    home.mkdir()
    passwords = home / "passwords.json"
    env = service_environment(
        RETENTION_POLICIES=str(policies),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{USER}:admin",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
        AIRFLOW__API_AUTH__JWT_SECRET="retention-plugin-test-secret",
    )
    with api_server(env, tmp_path) as url:
        yield {"url": url, "policy": policy, "password": json.loads(passwords.read_text())[USER]}


def token(served: dict) -> str:
    answer = requests.post(
        f"{served['url']}/auth/token",
        json={"username": USER, "password": served["password"]},
        timeout=10,
    )
    answer.raise_for_status()
    return answer.json()["access_token"]


def test_evidence_endpoint_needs_an_airflow_login(served: dict) -> None:
    policy = served["policy"]
    key = operation_key(policy.name, 1, policy.table, 1, "1")
    url = f"{served['url']}/retention/operations/{key}"
    assert requests.get(url, timeout=10).status_code == 401
    junk = requests.get(url, headers={"Authorization": "Bearer not-a-jwt"}, timeout=10)
    assert junk.status_code == 403
    headers = {"Authorization": f"Bearer {token(served)}"}
    answer = requests.get(url, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["selected"]["object_id"] == "obj-1"
    missing = requests.get(f"{url[:-64]}{'0' * 64}", headers=headers, timeout=10)
    assert missing.status_code == 404
