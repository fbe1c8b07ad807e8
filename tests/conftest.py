"""Shared fixtures: the real Postgres from .local/env, and helpers to build policies.

`make test` exports .local/env (written by scripts/devenv.py) before pytest
starts; running pytest directly after one `make env` works too, because the
file is loaded here before anything imports Airflow.
"""

from __future__ import annotations

import os
import shlex
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV_FILE = ROOT / ".local" / "env"
if ENV_FILE.exists():
    for line in ENV_FILE.read_text().splitlines():
        key, _, value = line.partition("=")
        if key and key not in os.environ:
            os.environ[key] = shlex.split(value)[0] if value else ""
if "RETENTION_TEST_DSN" not in os.environ:
    sys.exit("tests need .local/env: run `make test` (or `make env` once) first")
os.environ["AIRFLOW_CONN_RETENTION_TEST"] = os.environ["RETENTION_TEST_CONN"]
for path in (ROOT / "plugins", ROOT / "scripts", ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from retention.db import Connection, connect_dsn  # noqa: E402
from retention.migrate import migrate  # noqa: E402
from retention.policy import Policy, parse_policy  # noqa: E402

TEST_CONN_ID = "retention_test"


@pytest.fixture(scope="session")
def test_dsn() -> str:
    return os.environ["RETENTION_TEST_DSN"]


@pytest.fixture
def db(test_dsn: str) -> Iterator[Connection]:
    with connect_dsn(test_dsn) as conn:
        migrate(conn)
        yield conn


@pytest.fixture
def unique_name() -> str:
    """A name no other test uses, for tables and policies."""
    return f"t_{uuid.uuid4().hex[:10]}"


def policy_fields(name: str, **overrides: Any) -> dict[str, Any]:
    """A valid policy mapping for table public.<name>, with overrides."""
    fields: dict[str, Any] = {
        "schedule": "@daily",
        "start_date": "2026-01-01",
        "retain_days": 30,
        "postgres_conn_id": TEST_CONN_ID,
        "table": f"public.{name}",
        "key_column": "id",
        "timestamp_column": "created_at",
        "tenant_column": "tenant_id",
        "window_rows": 1000,
        "batch_rows": 100,
        "pool": "default_pool",
    }
    fields.update(overrides)
    return {k: v for k, v in fields.items() if v is not None}


def make_policy(name: str, **overrides: Any) -> Policy:
    policy, problems = parse_policy(name, policy_fields(name, **overrides))
    assert policy is not None, problems
    return policy


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real sandbox deletion API on a loopback port, as Airflow connection ``sandbox_api``."""
    from sandbox_api import SandboxServer

    server = SandboxServer(0).start()
    port = server.server_address[1]
    monkeypatch.setenv(
        "AIRFLOW_CONN_SANDBOX_API",
        f'{{"conn_type": "http", "host": "127.0.0.1", "port": {port}, "schema": "http"}}',
    )
    yield server
    server.stop()
