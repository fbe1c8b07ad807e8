"""Prepare the local environment for `make demo`, `make test` and `make airflow`.

Finds a PostgreSQL server in this order:

1. ``$RETENTION_PG_DSN`` if set (any libpq connection string or URI);
2. a server on 127.0.0.1:5432 that accepts the ``postgres`` (or current) user;
3. an embedded server from the ``pgserver`` package, kept under ``.local/pgdata``
   (git-ignored) and left running between commands.

It then creates the databases the project uses (Airflow metadata, demo target,
test target, test metadata; named per checkout, see :func:`database_names`) and
writes ``.local/env``: shell-quoted ``KEY=VALUE`` lines that the
Makefile exports and the test suite reads, so every command sees the same
Airflow home, folders and connections.  Nothing here is imported by the DAGs.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import json
import os
import shlex
import sys
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / ".local"
SANDBOX_PORT = int(os.environ.get("RETENTION_SANDBOX_PORT", "8765"))
EVENTS_PORT = int(os.environ.get("RETENTION_EVENTS_PORT", "8766"))
ROLES = ("metadata", "demo", "test", "test_metadata")


def database_names() -> dict[str, str]:
    """Database names of this checkout: remembered in ``.local/databases.json`` once chosen.

    They are derived from the checkout's path (``retention_<6 hex>_<role>``), so two
    checkouts sharing one server never overwrite each other's data; set
    ``RETENTION_DB_PREFIX`` before the first ``make`` to choose the prefix yourself.
    """
    remembered = LOCAL / "databases.json"
    if remembered.exists():
        names = json.loads(remembered.read_text())
        if set(names) == set(ROLES):
            return names
    prefix = os.environ.get("RETENTION_DB_PREFIX") or (
        "retention_" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:6]
    )
    names = {role: f"{prefix}_{role}" for role in ROLES}
    remembered.write_text(json.dumps(names, indent=2) + "\n")
    return names


def _try_connect(conninfo: str) -> bool:
    try:
        with psycopg.connect(conninfo, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def find_server() -> tuple[dict[str, str], str]:
    """Return libpq parameters of a maintenance connection, and where they came from."""
    dsn = os.environ.get("RETENTION_PG_DSN")
    if dsn:
        params = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
        if not _try_connect(make_conninfo(**params)):
            sys.exit(f"devenv: RETENTION_PG_DSN is set but no server answers at {dsn!r}")
        return params, "RETENTION_PG_DSN"
    if os.environ.get("RETENTION_PG_EMBEDDED") != "1":
        for user in ("postgres", getpass.getuser()):
            params = {"host": "127.0.0.1", "port": "5432", "user": user, "dbname": "postgres"}
            if _try_connect(make_conninfo(**params)):
                return params, "127.0.0.1:5432"
    return start_embedded(), "embedded pgserver in .local/pgdata"


def start_embedded() -> dict[str, str]:
    """Start (or reattach to) the embedded server; it keeps running after we exit."""
    import pgserver

    server = pgserver.get_server(LOCAL / "pgdata", cleanup_mode=None)
    params = {k: str(v) for k, v in conninfo_to_dict(server.get_uri()).items()}
    params.setdefault("dbname", "postgres")
    return params


def ensure_database(admin: dict[str, str], name: str) -> dict[str, str]:
    """Create database ``name`` if missing; fall back to the admin database if we may not."""
    with psycopg.connect(make_conninfo(**admin), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except psycopg.errors.InsufficientPrivilege:
                print(f"devenv: may not create database {name}; using {admin.get('dbname')}")
                return dict(admin)
    return {**admin, "dbname": name}


def worker_database(name: str, worker: str) -> str:
    """The copy of database ``name`` that pytest-xdist worker ``worker`` (``gw1``, …) uses.

    Worker ``gw0`` (and a run without workers) uses ``name`` itself, the one
    ``.local/env`` names; every other worker a copy of its own, because each
    test session empties its target database when it starts (see
    ``tests/support/fixtures.py``, which derives the same names).
    """
    return f"{name}_{worker}"


def worker_home(home: Path, worker: str) -> Path:
    """The Airflow home of pytest-xdist worker ``worker`` (``gw1``, …)."""
    return home.with_name(f"{home.name}-{worker}")


def alembic_version(params: dict[str, str]) -> str | None:
    """The Airflow metadata schema's migration of a database; None before the first."""
    with psycopg.connect(make_conninfo(**params), autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('alembic_version')").fetchone() == (None,):
            return None
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return row[0] if row else None


def prepare_test_workers(admin: dict[str, str], count: int) -> None:
    """Databases and Airflow homes for ``pytest -n count``'s workers ``gw1`` … (``make test-env``).

    The target database is created empty (each session empties it anyway); the
    metadata database is a ``CREATE DATABASE … TEMPLATE`` copy of the migrated test
    metadata database (about a second, where migrating one takes many), made again
    only when missing or when the original has been migrated further since. Each
    worker's home gets the test home's ``airflow.cfg`` (its own paths).
    """
    names = database_names()
    source = {**admin, "dbname": names["test_metadata"]}
    migrated = alembic_version(source)
    test_home = LOCAL / "test-airflow"
    config = test_home / "airflow.cfg"
    for index in range(1, count):
        worker = f"gw{index}"
        home = worker_home(test_home, worker)
        home.mkdir(exist_ok=True)
        if config.is_file():  # the same Fernet key: the copy's encrypted Variables stay readable
            (home / "airflow.cfg").write_text(config.read_text().replace(str(test_home), str(home)))
            (home / "airflow.cfg").chmod(0o600)
        ensure_database(admin, worker_database(names["test"], worker))
        copy = worker_database(names["test_metadata"], worker)
        with psycopg.connect(make_conninfo(**admin), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (copy,))
            if exists.fetchone() and alembic_version({**admin, "dbname": copy}) == migrated:
                continue
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(copy))
            )
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(copy), sql.Identifier(names["test_metadata"])
                )
            )
    print(f"devenv: databases and Airflow homes for {count} test worker(s)")


def airflow_connection(params: dict[str, str]) -> str:
    """An Airflow connection in JSON form (handles socket directories as hosts)."""
    conn: dict[str, object] = {
        "conn_type": "postgres",
        "host": params.get("host", "127.0.0.1"),
        "login": params.get("user", "postgres"),
        "schema": params["dbname"],
        "port": int(params.get("port", 5432)),
    }
    if params.get("password"):
        conn["password"] = params["password"]
    return json.dumps(conn)


def sqlalchemy_url(params: dict[str, str]) -> str:
    user = quote(params.get("user", "postgres"))
    password = f":{quote(params['password'])}" if params.get("password") else ""
    host = params.get("host", "127.0.0.1")
    port = params.get("port", "5432")
    if host.startswith("/"):
        return (
            f"postgresql+psycopg2://{user}{password}@/{params['dbname']}"
            f"?host={quote(host)}&port={port}"
        )
    return f"postgresql+psycopg2://{user}{password}@{host}:{port}/{params['dbname']}"


def stop_embedded() -> None:
    """Stop the embedded server, if this checkout started one (``make stop-pg``)."""
    if not (LOCAL / "pgdata" / "PG_VERSION").exists():
        print("devenv: no embedded PostgreSQL in .local/pgdata")
        return
    import pgserver

    # A handle with cleanup_mode "stop" stops the server when the last handle exits.
    pgserver.get_server(LOCAL / "pgdata", cleanup_mode="stop")
    print("devenv: embedded PostgreSQL in .local/pgdata stopped")


def local_secret(name: str) -> str:
    """A Standard Webhooks secret for local use, made once and kept in .local/."""
    path = LOCAL / name
    if not path.exists():
        path.write_text("whsec_" + base64.b64encode(os.urandom(24)).decode())
        path.chmod(0o600)
    return path.read_text().strip()


POOL_READER = "retention_pools"


def pool_reader(airflow_home: Path) -> dict[str, str]:
    """A viewer of the local Airflow whose password this checkout knows, as the connection
    ``retention_airflow_api``: ``plan_windows`` reads the window pool's slots through it, so
    a pool edited in the UI sizes the next plan under ``make airflow`` too.

    The simple auth manager keeps the passwords it finds in its file and only generates
    the missing ones, so the reader's is written there first. Users set in
    ``AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS`` when ``make env`` runs are kept.
    """
    users = os.environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin")
    if POOL_READER not in {user.split(":")[0] for user in users.split(",")}:
        users = f"{users},{POOL_READER}:viewer"
    passwords_file = airflow_home / "simple_auth_manager_passwords.json.generated"
    passwords = json.loads(passwords_file.read_text() or "{}") if passwords_file.exists() else {}
    if POOL_READER not in passwords:
        passwords[POOL_READER] = base64.urlsafe_b64encode(os.urandom(18)).decode()
        passwords_file.write_text(json.dumps(passwords) + "\n")
        passwords_file.chmod(0o600)
    api = {
        "conn_type": "http",
        "host": "localhost",
        "port": int(os.environ.get("AIRFLOW__API__PORT", "8080")),
        "schema": "http",
        "login": POOL_READER,
        "password": passwords[POOL_READER],
    }
    return {
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": users,
        "AIRFLOW_CONN_RETENTION_AIRFLOW_API": json.dumps(api),
    }


def main() -> None:
    if sys.argv[1:] == ["--stop"]:
        stop_embedded()
        return
    if sys.argv[1:2] == ["--test-workers"]:
        prepare_test_workers(find_server()[0], int(sys.argv[2]))
        return
    LOCAL.mkdir(exist_ok=True)
    admin, source = find_server()
    dbs = {role: ensure_database(admin, name) for role, name in database_names().items()}
    airflow_home = LOCAL / "airflow"
    airflow_home.mkdir(exist_ok=True)
    test_home = LOCAL / "test-airflow"
    test_home.mkdir(exist_ok=True)
    env = {
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sqlalchemy_url(dbs["metadata"]),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(airflow_home / "logs"),
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "10",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
        "AIRFLOW_CONN_RETENTION_TARGET": airflow_connection(dbs["demo"]),
        "AIRFLOW_CONN_MEDIA_API": json.dumps(
            {"conn_type": "http", "host": "127.0.0.1", "port": SANDBOX_PORT, "schema": "http"}
        ),
        "RETENTION_SANDBOX_PORT": str(SANDBOX_PORT),
        "AIRFLOW_CONN_MEDIA_EVENTS": json.dumps(
            {
                "conn_type": "http",
                "host": "127.0.0.1",
                "port": EVENTS_PORT,
                "schema": "http",
                "password": local_secret("events-secret"),
            }
        ),
        "RETENTION_EVENTS_PORT": str(EVENTS_PORT),
        "AIRFLOW_CONN_RETENTION_HINTS": json.dumps(
            {"conn_type": "generic", "password": local_secret("hints-secret")}
        ),
        "RETENTION_DEMO_DSN": make_conninfo(**dbs["demo"]),
        "RETENTION_TEST_DSN": make_conninfo(**dbs["test"]),
        "RETENTION_TEST_CONN": airflow_connection(dbs["test"]),
        # The tests' target as an Airflow connection too, e.g. for
        # `make cli ARGS="--conn-id retention_test dead-letters"`.
        "AIRFLOW_CONN_RETENTION_TEST": airflow_connection(dbs["test"]),
        # The tests run Airflow with a home and a metadata database of their own,
        # so `make test` never touches what `make demo` and `make airflow` use.
        "RETENTION_TEST_AIRFLOW_HOME": str(test_home),
        # This checkout has a test database: its absence fails the tests instead
        # of skipping them (without .local/env, e.g. `astro dev pytest`, they skip).
        "RETENTION_TEST_REQUIRE_DB": "1",
        "RETENTION_TEST_SQL_ALCHEMY_CONN": sqlalchemy_url(dbs["test_metadata"]),
        "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}",
        **pool_reader(airflow_home),
    }
    lines = [f"{key}={shlex.quote(value)}" for key, value in env.items()]
    # Passwords (the databases', the pool reader's) and secrets: readable by its owner only,
    # from the moment the file exists.
    env_file = LOCAL / "env"
    env_file.touch(mode=0o600)
    env_file.chmod(0o600)
    env_file.write_text("\n".join(lines) + "\n")
    print(f"devenv: PostgreSQL from {source}; settings in .local/env")


if __name__ == "__main__":
    main()
