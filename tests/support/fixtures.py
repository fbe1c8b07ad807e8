"""Fixtures for the tiers that need the real Postgres (integration, DAG, end to end).

A test that asks for the database skips, with the reason, when no test
database is configured or none answers at the configured address (a fresh
clone, ``astro dev pytest``, a laptop with PostgreSQL stopped), so the unit
and DAG tiers still run and pass. ``make env`` writes
``RETENTION_TEST_REQUIRE_DB=1`` to ``.local/env``: in a checkout set up that way
(``make test``, CI) a database that does not answer is an error, not a skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from devtools.receiver import Receiver, new_secret
from retention.db.connection import Connection, connect_dsn
from retention.db.migrate import migrate
from tests.support.env import load_local_env
from tests.support.policies import HTTP_CONN_ID
from tests.support.workers import use_worker_databases

load_local_env()
use_worker_databases()  # under `pytest -n`, worker gw1's own copies, and so on
if "RETENTION_TEST_CONN" in os.environ:
    os.environ.setdefault("AIRFLOW_CONN_RETENTION_TEST", os.environ["RETENTION_TEST_CONN"])
if "RETENTION_TEST_AIRFLOW_HOME" in os.environ:
    # Never the home and metadata database of `make demo` / `make airflow`.
    home = os.environ["RETENTION_TEST_AIRFLOW_HOME"]
    os.environ["AIRFLOW_HOME"] = home
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = os.environ[
        "RETENTION_TEST_SQL_ALCHEMY_CONN"
    ]
    os.environ["AIRFLOW__LOGGING__BASE_LOG_FOLDER"] = f"{home}/logs"


@pytest.fixture(scope="session")
def test_dsn() -> str:
    dsn = os.environ.get("RETENTION_TEST_DSN")
    if not dsn:
        pytest.skip("no test database: run `make test` (or `make env` once) to configure one")
    problem = unreachable(dsn)
    if problem:
        message = f"no test database answers at {problem}"
        if os.environ.get("RETENTION_TEST_REQUIRE_DB") == "1":
            pytest.fail(f"{message} (RETENTION_TEST_REQUIRE_DB=1: start PostgreSQL or `make env`)")
        pytest.skip(f"{message}; start PostgreSQL or run `make env`")
    clean_target(dsn)
    return dsn


def unreachable(dsn: str) -> str | None:
    """Where the test database is and why it does not answer; None when it does."""
    params = conninfo_to_dict(dsn)
    where = f"{params.get('host', 'localhost')}:{params.get('port', 5432)}"
    try:
        with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as failed:
        first_line = str(failed).strip().splitlines()[0] if str(failed).strip() else "no answer"
        return f"{where} (RETENTION_TEST_DSN): {first_line}"
    return None


def clean_target(dsn: str) -> None:
    """Start the session from an empty test database: no ledger, no tables of earlier runs."""
    with connect_dsn(dsn) as conn:
        conn.execute("DROP SCHEMA IF EXISTS retention CASCADE")
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 't\\_%'"
        ).fetchall()
        for table in tables:
            name = sql.Identifier("public", table["tablename"])
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(name))


@pytest.fixture
def db(test_dsn: str) -> Iterator[Connection]:
    with connect_dsn(test_dsn) as conn:
        migrate(conn)
        yield conn


@pytest.fixture
def unique_name() -> str:
    """A name no other test uses, for tables and policies."""
    return f"t_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real sandbox deletion API on loopback, also as the Airflow connection ``sandbox_api``."""
    from devtools.sandbox_api import SandboxServer

    server = SandboxServer(0).start()
    port = server.server_address[1]
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{HTTP_CONN_ID.upper()}",
        f'{{"conn_type": "http", "host": "127.0.0.1", "port": {port}, "schema": "http"}}',
    )
    yield server
    server.stop()


@pytest.fixture
def fresh_database(test_dsn: str) -> Iterator[Callable[..., str]]:
    """Make databases of their own (dropped afterwards); returns their DSNs.

    ``settings`` become ``ALTER DATABASE … SET`` defaults (a server time zone, say),
    which the package's own sessions must not depend on.
    """
    made: list[str] = []

    def make(**settings: str) -> str:
        name = f"retention_t_{uuid.uuid4().hex[:8]}"
        with connect_dsn(test_dsn) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            for key, value in settings.items():
                admin.execute(
                    sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                        sql.Identifier(name), sql.Identifier(key), sql.Literal(value)
                    )
                )
        made.append(name)
        return make_conninfo(**{**conninfo_to_dict(test_dsn), "dbname": name})

    yield make
    with connect_dsn(test_dsn) as admin:
        for name in made:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def events_receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """A real Standard Webhooks receiver on loopback, with a fresh secret, as the Airflow
    connection ``events_receiver`` (the one the sample policies' ``notify:`` names)."""
    server = Receiver(new_secret()).start()
    monkeypatch.setenv("AIRFLOW_CONN_EVENTS_RECEIVER", server.connection())
    yield server
    server.shutdown()
    server.server_close()
