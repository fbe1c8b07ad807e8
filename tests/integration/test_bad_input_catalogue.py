"""The bad-input catalogue (docs/bad-inputs.md), checked against the real code where it
needs Postgres or an HTTP server: each row's input is fed to the code, and what the user
would see (the exception's text, the HTTP answer, the ledger's state, class and reason, the
failing task) must be what the row quotes (see tests/support/catalogue.py for the rule).

One plugin app serves the hint and evidence rows for the whole module; the other rows build
their few rows with the setups of the tests the catalogue names. This module also checks that
every row that quotes something has a producer, here or in tests/unit/test_bad_input_catalogue.py.
"""

from __future__ import annotations

import json
import logging
import shlex
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
import requests
import yaml
from airflow.sdk.exceptions import AirflowFailException
from fastapi import FastAPI
from psycopg import sql

from devtools.airflow_services import free_port
from devtools.plans import request as plan_request
from devtools.receiver import Receiver, new_secret
from devtools.sandbox_api import SandboxServer
from retention.airflow.alerts import SEND_ALERTS_TASK, AlertsNotSent
from retention.airflow.connections import signing_secret
from retention.airflow.dag_factory import build_dag
from retention.airflow.replay_guard import REPLAY_RUNS_PATH, ReplayGuard
from retention.airflow.rights import require_replay_right
from retention.airflow.steps import DeliveryIncomplete, deliver_events_step
from retention.db.connection import Connection, connect_dsn
from retention.db.migrate import migrate
from retention.db.table_check import TableMismatch
from retention.events.outbox import NotifyConfigError
from retention.evidence.explain import explain
from retention.evidence.reconcile import reconcile_run
from retention.objects.deleter import work_operations
from retention.objects.keys import operation_key
from retention.objects.kind import EndpointSuspect, OperationsKind
from retention.policy import Policy
from retention.queue.http import plain_sender
from retention.rows.children import CoupledTableError, check_coupled_tables
from retention.rows.deleter import WindowDeleteError, delete_window
from retention.rows.planner import PlanError, plan_windows
from tests.integration.test_alerts import CONN_ID as ALERTS_CONN_ID
from tests.integration.test_alerts import dirty_run, send
from tests.integration.test_children import children_by_legacy_id
from tests.integration.test_cli import cli
from tests.integration.test_events import delete_remotely, notifying_policy
from tests.integration.test_hints_api import post_hint, signed_headers
from tests.integration.test_remote_edges import ops
from tests.support.catalogue import (
    Producers,
    Row,
    answer_text,
    disagreements,
    quoting_rows,
    row_id,
)
from tests.support.policies import make_policy, policy_fields, remote_fields, remote_policy
from tests.support.remote import enqueue_all, sandbox_sender
from tests.support.remote import work as work_pass
from tests.support.tables import create_media_table, create_table, old
from tests.support.web import serving
from tests.unit.test_bad_input_catalogue import UNIT

INTEGRATION = Producers()


@pytest.fixture(scope="module")
def api(test_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The plugin app on loopback, twice: under ``/retention`` with a stand-in that lets no
    user read any DAG, and under ``/airflow/retention`` behind Airflow's own login.
    One remote policy (5 old rows, 5 new) takes hints signed with ``secret``."""
    from airflow.api_fastapi import app as airflow_app

    from retention.airflow.api import create_app

    name = f"t_{uuid.uuid4().hex[:10]}"
    with connect_dsn(test_dsn) as conn, pytest.MonkeyPatch.context() as env:
        migrate(conn)
        create_media_table(conn, name, 5, new_rows=5)
        fields = policy_fields(name, window_per_tenant=False, remote=remote_fields(name))
        path = tmp_path_factory.mktemp("catalogue") / "policies.yaml"
        path.write_text(yaml.safe_dump({"policies": {name: fields}}))
        env.setenv("RETENTION_POLICIES", str(path))
        secret = new_secret()
        hints = json.dumps({"conn_type": "generic", "password": secret})
        env.setenv("AIRFLOW_CONN_RETENTION_HINTS", hints)
        env.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "retention-catalogue-test-secret")
        env.setattr(airflow_app._AuthManagerState, "instance", None)  # restored afterwards
        airflow_app.create_auth_manager()  # what the api-server makes before serving
        root = FastAPI()
        root.mount("/retention", create_app(airflow_auth=False, authorize=lambda _u, _d: False))
        root.mount("/airflow/retention", create_app())
        root.mount("/guarded", ReplayGuard(FastAPI()))  # Airflow's own routes stand behind it
        with serving(root) as url:
            yield {
                "url": f"{url}/retention",
                "airflow_url": f"{url}/airflow/retention",
                "guarded_url": f"{url}/guarded",
                "secret": secret,
                "policy": name,
            }


@pytest.fixture(scope="module")
def sandbox_api() -> Iterator[SandboxServer]:
    """One sandbox deletion API for the module; each row starts from a reset one."""
    server = SandboxServer(0).start()
    yield server
    server.stop()


@dataclass
class Bench:
    """What a producer may use: the database, a fresh name, the servers, the environment."""

    db: Connection
    dsn: str
    name: str
    api: dict[str, str]
    sandbox: SandboxServer
    monkeypatch: pytest.MonkeyPatch
    later: ExitStack

    def alert_receiver(self) -> Receiver:
        """A receiver on loopback, as the connection that dirty runs alert."""
        receiver = Receiver().start()
        self.later.callback(receiver.server_close)
        self.later.callback(receiver.shutdown)
        self.monkeypatch.setenv(f"AIRFLOW_CONN_{ALERTS_CONN_ID.upper()}", receiver.connection())
        return receiver

    def event_receiver(self) -> Receiver:
        receiver = Receiver(new_secret()).start()
        self.later.callback(receiver.server_close)
        self.later.callback(receiver.shutdown)
        self.monkeypatch.setenv("AIRFLOW_CONN_EVENTS_RECEIVER", receiver.connection())
        return receiver


# --- alerts and connections ---------------------------------------------------------------


def alert_failure(policy: Policy) -> list[str]:
    """send_alerts' step for the policy's dirty run: the task and its error."""
    with pytest.raises(AlertsNotSent) as refused:
        send(policy)
    return [SEND_ALERTS_TASK, str(refused.value)]


@INTEGRATION.of('extra `"format": "teams"`')
def alert_format_teams(row: Row, bench: Bench) -> list[str]:
    receiver = bench.alert_receiver()
    bench.monkeypatch.setenv("AIRFLOW_CONN_OPS_TEAMS", receiver.connection(format="teams"))
    return alert_failure(dirty_run(bench.db, bench.name, on_dirty="ops_teams"))


@INTEGRATION.of("`on_dirty` names a connection that does not exist")
def alert_connection_missing(row: Row, bench: Bench) -> list[str]:
    return alert_failure(dirty_run(bench.db, bench.name, on_dirty="ops_nowhere"))


@INTEGRATION.of("answers 503")
def alert_refused(row: Row, bench: Bench) -> list[str]:
    bench.alert_receiver().statuses = [503]
    return alert_failure(dirty_run(bench.db, bench.name))


@INTEGRATION.of("nothing listens")
def alert_unreachable(row: Row, bench: Bench) -> list[str]:
    closed = json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": free_port()})
    bench.monkeypatch.setenv(f"AIRFLOW_CONN_{ALERTS_CONN_ID.upper()}", closed)
    return alert_failure(dirty_run(bench.db, bench.name))


@INTEGRATION.of("a notify connection with a login and a `whsec_` password")
def leaky_connection(row: Row, bench: Bench) -> list[str]:
    leaky = {"conn_type": "http", "host": "h", "login": "me", "password": new_secret()}
    bench.monkeypatch.setenv("AIRFLOW_CONN_LEAKY", json.dumps(leaky))
    with pytest.raises(NotifyConfigError) as refused:
        signing_secret("leaky")
    return [str(refused.value)]


@INTEGRATION.of(
    '`holds place --tenant 42 --reason ""` (an empty reason)',
    '`holds place --policy nope --tenant 42 --reason "case 991"` (an unknown policy)',
)
def hold_refused(row: Row, bench: Bench) -> list[str]:
    args = shlex.split(row.input.split("`")[1])
    before = bench.db.execute("SELECT count(*) AS n FROM retention.holds").fetchone()
    run = cli("--dsn", bench.dsn, *args)
    after = bench.db.execute("SELECT count(*) AS n FROM retention.holds").fetchone()
    assert (run.returncode, before) == (2, after), run.stderr
    return [run.stderr.strip()]


# --- hints and evidence: the plugin's HTTP answers -----------------------------------------


def one_object(api: dict[str, str], **item: str) -> dict[str, Any]:
    return {"policy": api["policy"], "objects": [{"key": "obj-1", **item}]}


@INTEGRATION.of("a bad signature, or a timestamp older than 5 minutes")
def hint_unsigned(row: Row, bench: Bench) -> list[str]:
    body = one_object(bench.api)
    return [
        answer_text(post_hint(bench.api, body, secret=new_secret())),
        answer_text(post_hint(bench.api, body, age=6 * 60)),
    ]


def post_raw(api: dict[str, str], data: bytes, signature: str | None = None) -> str:
    headers = signed_headers(api, data, signature=signature)
    return answer_text(requests.post(f"{api['url']}/hints", data=data, headers=headers, timeout=10))


@INTEGRATION.of("a signature header with no comma, three parts, bad base64, or empty")
def hint_malformed_signature(row: Row, bench: Bench) -> list[str]:
    data = json.dumps(one_object(bench.api)).encode()
    return [post_raw(bench.api, data, signature) for signature in ("v1", "v1,a,b", "v1,!!!", "")]


@INTEGRATION.of("a body that is not UTF-8")
def hint_not_utf8(row: Row, bench: Bench) -> list[str]:
    return [post_raw(bench.api, b'{"policy": "\xff\xfe"}')]


@INTEGRATION.of("a NUL character in a key")
def hint_nul(row: Row, bench: Bench) -> list[str]:
    body = {"policy": bench.api["policy"], "objects": [{"key": "obj-1\u0000"}]}
    return [answer_text(post_hint(bench.api, body))]


@INTEGRATION.of('`"priority": "urgent"` without a `reason`')
def hint_urgent_without_reason(row: Row, bench: Bench) -> list[str]:
    body = {**one_object(bench.api), "priority": "urgent"}
    return [answer_text(post_hint(bench.api, body))]


@INTEGRATION.of("an object whose row is younger than `retain_days`")
def hint_young_object(row: Row, bench: Bench) -> list[str]:
    """The module's policy keeps 30 days; its row 10 is made 10 days old for the hint."""
    table = sql.Identifier("public", bench.api["policy"])
    young = sql.SQL("UPDATE {} SET created_at = {} WHERE id = 10")
    before = bench.db.execute(
        sql.SQL("SELECT created_at FROM {} WHERE id = 10").format(table)
    ).fetchone()["created_at"]
    bench.db.execute(young.format(table, sql.SQL("now() - interval '10 days'")))
    try:
        body = {"policy": bench.api["policy"], "objects": [{"key": "obj-10"}]}
        return [answer_text(post_hint(bench.api, body))]
    finally:
        bench.db.execute(young.format(table, sql.Literal(before)))


@INTEGRATION.of("`due_at` with an offset of `+05:30:30`, or `+15:00`, or none")
def hint_offsets(row: Row, bench: Bench) -> list[str]:
    return [
        answer_text(post_hint(bench.api, one_object(bench.api, due_at=f"2026-12-01T00:00:00{z}")))
        for z in ("+05:30:30", "+15:00", "")
    ]


@INTEGRATION.of("JSON nested 40 levels deep (or 100,000)")
def hint_nested(row: Row, bench: Bench) -> list[str]:
    deep: object = "x"
    for _ in range(40):
        deep = [deep]
    return [
        answer_text(post_hint(bench.api, {**one_object(bench.api), "x": deep})),
        answer_text(post_hint(bench.api, b"[" * 100_000 + b"]" * 100_000)),
    ]


@INTEGRATION.of("`GET /retention/operations/%00` (or any key that is not 64 hex digits)")
def evidence_not_a_key(row: Row, bench: Bench) -> list[str]:
    return [
        answer_text(requests.get(f"{bench.api['url']}/operations/{key}", timeout=10))
        for key in ("%00", "abc", "0" * 63, "Z" * 64)
    ]


@INTEGRATION.of("no token / a junk token")
def evidence_without_login(row: Row, bench: Bench) -> list[str]:
    url = f"{bench.api['airflow_url']}/operations/{'0' * 64}"
    junk = {"Authorization": "Bearer not-a-jwt"}
    return [
        answer_text(requests.get(url, timeout=10)),
        answer_text(requests.get(url, headers=junk, timeout=10)),
    ]


@INTEGRATION.of("a user who may not read the policy's DAG")
def evidence_of_an_unreadable_dag(row: Row, bench: Bench) -> list[str]:
    """A real operation (made by a hint), asked for by a user whom the stand-in for the auth
    manager lets read no DAG: whatever the answer is (status and detail), it is reported."""
    policy = bench.api["policy"]
    assert post_hint(bench.api, one_object(bench.api)).status_code in (200, 202)
    key = operation_key(policy, 1, f"public.{policy}", 1, "1")
    return [answer_text(requests.get(f"{bench.api['url']}/operations/{key}", timeout=10))]


# --- replay rights ---------------------------------------------------------------------------

VIEWER = "vic"  # a user of Airflow's simple auth manager who may read, not trigger


@INTEGRATION.of("a `retention__replay` run whose user may not trigger the policy's DAG")
def replay_task_refused(row: Row, bench: Bench) -> list[str]:
    """The replay task's check, as the task makes it, for a run triggered by a viewer."""
    from airflow.sdk.exceptions import AirflowFailException

    bench.monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", f"{VIEWER}:viewer")
    with pytest.raises(AirflowFailException) as refused:
        require_replay_right(bench.api["policy"], VIEWER, "manual")
    return [str(refused.value)]


@INTEGRATION.of(
    "`POST /api/v2/dags/retention__replay/dagRuns` by a user who may not trigger the policy's DAG"
)
def replay_guard_refused(row: Row, bench: Bench) -> list[str]:
    """The api-server's guard, asked by a viewer with a real Airflow token."""
    return [answer_text(trigger_replay(bench, VIEWER, "viewer", {"policy": bench.api["policy"]}))]


@INTEGRATION.of("`POST /api/v2/dags/retention__replay/dagRuns` whose conf names no policy")
def replay_guard_without_policy(row: Row, bench: Bench) -> list[str]:
    return [answer_text(trigger_replay(bench, "ada", "admin", {}))]


@INTEGRATION.of("`POST /api/v2/dags/retention__replay/dagRuns` with a body over 1 MiB")
def replay_guard_oversized(row: Row, bench: Bench) -> list[str]:
    conf = {"policy": bench.api["policy"], "reason": "x" * (1024 * 1024)}
    return [answer_text(trigger_replay(bench, "ada", "admin", conf))]


def trigger_replay(bench: Bench, user: str, role: str, conf: dict[str, Any]) -> Any:
    """What the guard in front of Airflow answers a user with a real token of ``role``."""
    from airflow.api_fastapi import app as airflow_app
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    token = airflow_app.get_auth_manager().generate_jwt(
        SimpleAuthManagerUser(username=user, role=role)
    )
    return requests.post(
        f"{bench.api['guarded_url']}{REPLAY_RUNS_PATH}",
        json={"conf": conf},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )


# --- the database ----------------------------------------------------------------------------


@INTEGRATION.of("the table or a column does not exist; a non-integer key; a non-timestamp column")
def table_missing(row: Row, bench: Bench) -> list[str]:
    """The quoted example: a table that does not exist (the other cases are in test_planner)."""
    policy = make_policy("x", table=f"public.{bench.name}")  # never created
    with pytest.raises(PlanError) as refused:
        plan_windows(bench.db, plan_request(policy))
    return [str(refused.value)]


@INTEGRATION.of("a column the policy names does not exist (`timestamp_column: creatd_at`)")
def column_misspelt(row: Row, bench: Bench) -> list[str]:
    """The run's first task on a real table: its id and its error (no retry)."""
    create_table(bench.db, bench.name, [(1, 1, old())])
    policy = make_policy("x", table=f"public.{bench.name}", timestamp_column="creatd_at")
    (first,) = [t for t in build_dag(policy, auto_register=False).tasks if not t.upstream_task_ids]
    with pytest.raises(AirflowFailException) as refused:
        first.python_callable()
    assert isinstance(refused.value.__cause__, TableMismatch)
    return [first.task_id, str(refused.value)]


@INTEGRATION.of(
    "a foreign key references the policy's table (`asset_id` in a renditions table) and is "
    "not listed in `children:`, not `ON DELETE CASCADE` / `SET NULL`, not in "
    "`ignore_foreign_keys:`"
)
def foreign_key_unaccounted(row: Row, bench: Bench) -> list[str]:
    """The run's first task on a table a renditions table references: its id and its error."""
    create_table(bench.db, bench.name, [(1, 1, old())])
    bench.db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, asset_id bigint REFERENCES {} (id))"
        ).format(
            sql.Identifier("public", f"{bench.name}_renditions"),
            sql.Identifier("public", bench.name),
        )
    )
    policy = make_policy("x", table=f"public.{bench.name}")
    (first,) = [t for t in build_dag(policy, auto_register=False).tasks if not t.upstream_task_ids]
    with pytest.raises(AirflowFailException) as refused:
        first.python_callable()
    assert isinstance(refused.value.__cause__, CoupledTableError)
    return [first.task_id, str(refused.value)]


@INTEGRATION.of("a table listed in `children:` does not exist")
def child_table_missing(row: Row, bench: Bench) -> list[str]:
    """The coupled-tables check the run's first task makes."""
    create_table(bench.db, bench.name, [(1, 1, old())])
    children = [{"table": "no_such_child", "foreign_key": "asset_id"}]
    policy = make_policy("x", table=f"public.{bench.name}", children=children)
    with pytest.raises(CoupledTableError) as refused:
        check_coupled_tables(bench.db, policy)
    return [str(refused.value)]


def coupled_table_problem(bench: Bench, children: list[dict[str, Any]]) -> list[str]:
    """The coupled-tables check the run's first task makes, on a policy ``x`` of the bench's
    table with ``children``: what it refuses."""
    policy = make_policy("x", table=f"public.{bench.name}", children=children)
    with pytest.raises(CoupledTableError) as refused:
        check_coupled_tables(bench.db, policy)
    return [str(refused.value)]


def first_task_warnings(bench: Bench, policy: Policy) -> list[str]:
    """The warnings the run's first task (``migrate_schema``) logs, which passes."""
    (first,) = [t for t in build_dag(policy, auto_register=False).tasks if not t.upstream_task_ids]
    caught: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                caught.append(record.getMessage())

    steps_log = logging.getLogger("retention.airflow.steps")
    handler = Keep()
    steps_log.addHandler(handler)
    try:
        first.python_callable()
    finally:
        steps_log.removeHandler(handler)
    return caught


@INTEGRATION.of(
    "a child's `references:` names a column of its parent that is not unique on its own "
    "(`code`, unique per tenant)"
)
def references_not_unique(row: Row, bench: Bench) -> list[str]:
    create_table(bench.db, bench.name, [(1, 1, old())])
    parent = sql.Identifier("public", bench.name)
    bench.db.execute(sql.SQL("ALTER TABLE {} ADD COLUMN code text").format(parent))
    bench.db.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (tenant_id, code)").format(parent))
    bench.db.execute(
        sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, code text)").format(
            sql.Identifier("public", f"{bench.name}_tags")
        )
    )
    child = {"table": f"{bench.name}_tags", "foreign_key": "code", "references": "code"}
    return coupled_table_problem(bench, [child])


@INTEGRATION.of(
    "a composite foreign key ((`tenant_id`, `asset_id`) → (`tenant_id`, `id`)) references "
    "the policy's table, its table listed in `children:` (`foreign_key: asset_id`)"
)
def composite_foreign_key(row: Row, bench: Bench) -> list[str]:
    create_table(bench.db, bench.name, [(1, 1, old())])
    parent = sql.Identifier("public", bench.name)
    bench.db.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (tenant_id, id)").format(parent))
    bench.db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, tenant_id integer, asset_id bigint, "
            "CONSTRAINT {} FOREIGN KEY (tenant_id, asset_id) REFERENCES {} (tenant_id, id))"
        ).format(
            sql.Identifier("public", f"{bench.name}_renditions"),
            sql.Identifier(f"{bench.name}_renditions_fk"),
            parent,
        )
    )
    child = {"table": f"{bench.name}_renditions", "foreign_key": "asset_id"}
    return coupled_table_problem(bench, [child])


@INTEGRATION.of(
    "a listed child without a foreign key constraint and without `references:`, whose "
    "parent has no single-column primary key"
)
def child_without_constraint_or_key(row: Row, bench: Bench) -> list[str]:
    create_table(bench.db, bench.name, [(1, 1, old())])
    bench.db.execute(
        sql.SQL("CREATE TABLE {} (id bigint, asset_id bigint REFERENCES {} (id))").format(
            sql.Identifier("public", f"{bench.name}_renditions"),
            sql.Identifier("public", bench.name),
        )
    )
    bench.db.execute(
        sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, rendition_id bigint)").format(
            sql.Identifier("public", f"{bench.name}_chunks")
        )
    )
    chunks = {"table": f"{bench.name}_chunks", "foreign_key": "rendition_id"}
    renditions = {
        "table": f"{bench.name}_renditions",
        "foreign_key": "asset_id",
        "children": [chunks],
    }
    return coupled_table_problem(bench, [renditions])


@INTEGRATION.of("an `ignore_foreign_keys:` entry naming no foreign key (`no_such_fk`)")
def ignored_foreign_key_unknown(row: Row, bench: Bench) -> list[str]:
    create_table(bench.db, bench.name, [(1, 1, old())])
    ignored = [{"constraint": "no_such_fk", "reason": "kept for audit"}]
    policy = make_policy("x", table=f"public.{bench.name}", ignore_foreign_keys=ignored)
    return first_task_warnings(bench, policy)


@INTEGRATION.of("an `ON DELETE CASCADE` foreign key references the policy's table, unlisted")
def unlisted_cascade(row: Row, bench: Bench) -> list[str]:
    create_table(bench.db, bench.name, [(1, 1, old())])
    bench.db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, "
            "asset_id bigint CONSTRAINT {} REFERENCES {} (id) ON DELETE CASCADE)"
        ).format(
            sql.Identifier("public", f"{bench.name}_renditions"),
            sql.Identifier(f"{bench.name}_renditions_fk"),
            sql.Identifier("public", bench.name),
        )
    )
    return first_task_warnings(bench, make_policy("x", table=f"public.{bench.name}"))


@INTEGRATION.of(
    "a listed child sets `references: legacy_id` while its `asset_id` has a foreign key "
    "constraint to the parent's `id`"
)
def child_references_disagrees(row: Row, bench: Bench) -> list[str]:
    children_by_legacy_id(bench.db, bench.name)
    child = {"table": f"{bench.name}_r", "foreign_key": "asset_id", "references": "legacy_id"}
    return coupled_table_problem(bench, [child])


@INTEGRATION.of("no index on the timestamp column")
def no_timestamp_index(row: Row, bench: Bench) -> list[str]:
    """The run's plan notes, and the column they are read from."""
    create_table(bench.db, bench.name, [(i, 1, old()) for i in range(1, 6)])
    bench.db.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier("public", index_on(bench))))
    plan_windows(bench.db, plan_request(make_policy(bench.name)))
    column = "plan_notes"
    run = bench.db.execute(
        sql.SQL("SELECT {} FROM retention.runs WHERE policy = %s").format(sql.Identifier(column)),
        (bench.name,),
    ).fetchone()
    assert run is not None
    return [column, *run[column]]


def index_on(bench: Bench) -> str:
    found = bench.db.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
        (bench.name, "%(created_at)%"),
    ).fetchone()
    assert found is not None
    return str(found["indexname"])


@INTEGRATION.of("a row locked by another session for the whole window")
def row_locked_for_the_window(row: Row, bench: Bench) -> list[str]:
    create_table(bench.db, bench.name, [(i, 1, old()) for i in range(1, 11)])
    policy = make_policy(bench.name, window_rows=100, batch_rows=4, lock_timeout_ms=50)
    (window,) = plan_windows(bench.db, plan_request(policy))
    with psycopg.connect(bench.dsn) as blocker:
        blocker.execute(sql.SQL("SELECT 1 FROM {} WHERE id = 6 FOR UPDATE").format(table(bench)))
        with pytest.raises(WindowDeleteError) as failed:
            delete_window(bench.db, policy, window, batch_rows=4, dry_run=False, sleep=no_sleep)
    return [str(failed.value)]


def no_sleep(_seconds: float) -> None:
    """The deleter's backoff between timeouts of one row, skipped."""


def table(bench: Bench) -> sql.Identifier:
    return sql.Identifier("public", bench.name)


def ledger_of(bench: Bench, policy: Policy, object_id: str) -> dict[str, Any]:
    return ops(bench.db, policy)[object_id]


@INTEGRATION.of("a row referenced by a foreign key named in `ignore_foreign_keys:` (remote policy)")
def row_referenced(row: Row, bench: Bench) -> list[str]:
    create_media_table(bench.db, bench.name, 3)
    child = sql.Identifier("public", f"{bench.name}_child")
    bench.db.execute(
        sql.SQL("CREATE TABLE {} (parent bigint REFERENCES {} (id))").format(child, table(bench))
    )
    bench.db.execute(sql.SQL("INSERT INTO {} VALUES (2)").format(child))
    ignored = [{"constraint": f"{bench.name}_child_parent_fkey", "reason": "kept on purpose"}]
    policy = remote_policy(bench.name, ignore_foreign_keys=ignored)
    enqueue_all(bench.db, policy)
    work_pass(bench.dsn, policy, bench.sandbox)
    refused = ledger_of(bench, policy, "obj-2")
    bench.db.execute(sql.SQL("DROP TABLE {}").format(child))
    return [refused["state"], refused["failure_class"]]


@INTEGRATION.of("a trigger that refuses a row's delete")
def row_refused_by_a_trigger(row: Row, bench: Bench) -> list[str]:
    """The refused row's state and class, and the type of the events the others got (none
    is reported for the refused row, which has none)."""
    policy = notifying_policy(bench.name)
    create_media_table(bench.db, bench.name, 3)
    refuse = sql.Identifier("public", f"{bench.name}_refuse")
    bench.db.execute(
        sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF OLD.id = 2 THEN RAISE EXCEPTION 'row 2 is on legal hold'; END IF; "
            "RETURN OLD; END $$"
        ).format(refuse)
    )
    trigger = "CREATE TRIGGER refuse BEFORE DELETE ON {} FOR EACH ROW EXECUTE FUNCTION {}()"
    bench.db.execute(sql.SQL(trigger).format(table(bench), refuse))
    enqueue_all(bench.db, policy)
    work_pass(bench.dsn, policy, bench.sandbox)
    refused = ledger_of(bench, policy, "obj-2")
    events = bench.db.execute(
        "SELECT o.object_id, e.payload::jsonb ->> 'type' AS type FROM retention.operations o "
        "JOIN retention.outbox e USING (operation_key) WHERE o.policy = %s",
        (policy.name,),
    ).fetchall()
    assert "obj-2" not in {e["object_id"] for e in events}, "an event for a row not deleted"
    return [refused["state"], refused["failure_class"], *sorted({e["type"] for e in events})]


@INTEGRATION.of("a row locked during the local delete of a confirmed deletion")
def row_locked_after_confirmation(row: Row, bench: Bench) -> list[str]:
    create_media_table(bench.db, bench.name, 3)
    policy = remote_policy(bench.name).model_copy(update={"lock_timeout_ms": 100})
    enqueue_all(bench.db, policy)
    with psycopg.connect(bench.dsn) as blocker:
        blocker.execute(sql.SQL("SELECT 1 FROM {} WHERE id = 2 FOR UPDATE").format(table(bench)))
        work_pass(bench.dsn, policy, bench.sandbox)
    locked = ledger_of(bench, policy, "obj-2")
    return [locked["state"], locked["failure_class"]]


# --- row data and the remote API ------------------------------------------------------------


@INTEGRATION.of(
    "an object id or tenant that is empty, `.`, `..`, has control characters or is over 1 KiB"
)
def object_id_not_a_segment(row: Row, bench: Bench) -> list[str]:
    """The quoted example, ``..`` (every case is in test_remote_edges)."""
    create_media_table(bench.db, bench.name, 2)
    bench.db.execute(sql.SQL("UPDATE {} SET object_key = '..' WHERE id = 1").format(table(bench)))
    policy = remote_policy(bench.name)
    enqueue_all(bench.db, policy)
    work_pass(bench.dsn, policy, bench.sandbox)
    bad = ledger_of(bench, policy, "..")
    return [bad["state"], bad["failure_class"], bad["reason"]]


@INTEGRATION.of("a row restored, given a new object or tenant, or made young after it was enqueued")
def row_changed(row: Row, bench: Bench) -> list[str]:
    """Object 1 renamed before the call; object 2 renamed while its call is under way."""
    create_media_table(bench.db, bench.name, 2)
    policy = remote_policy(bench.name)
    enqueue_all(bench.db, policy)
    rename = sql.SQL("UPDATE {} SET object_key = %s WHERE id = %s").format(table(bench))
    bench.db.execute(rename, ("obj-new-1", 1))

    class RenamedDuringTheCall(OperationsKind):
        def send(self, job: Any) -> Any:
            answer = super().send(job)
            bench.db.execute(rename, ("obj-new-2", 2))
            return answer

    with connect_dsn(bench.dsn) as conn:
        work_operations(conn, RenamedDuringTheCall(policy, sandbox_sender(bench.sandbox)))
    before, during = ledger_of(bench, policy, "obj-1"), ledger_of(bench, policy, "obj-2")
    return [before["state"], before["failure_class"], during["state"], during["failure_class"]]


@INTEGRATION.of("every answer is 404 (a wrong template or host)")
def every_answer_404(row: Row, bench: Bench) -> list[str]:
    create_media_table(bench.db, bench.name, 21)
    bench.sandbox.state.configure(not_found_all=True)
    policy = remote_policy(bench.name, not_found_breaker=20, claim_batch=5)
    enqueue_all(bench.db, policy)
    with pytest.raises(EndpointSuspect) as tripped:
        work_pass(bench.dsn, policy, bench.sandbox)
    return [str(tripped.value)]


@INTEGRATION.of(
    "a derivative (`remote.derivatives`) that answers 403 three times while other calls succeed"
)
def derivative_refused(row: Row, bench: Bench) -> list[str]:
    """Three passes, each due at once: the third refusal, with other calls confirmed, is dead."""
    create_media_table(bench.db, bench.name, 2)
    bench.sandbox.state.configure(hold=["obj-1/thumbnails"])
    thumbnails = {"name": "thumbnails", "endpoint": "/v1/assets/{object_id}/thumbnails"}
    policy = remote_policy(bench.name, derivatives=[thumbnails])
    enqueue_all(bench.db, policy)
    for _ in range(3):
        work_pass(bench.dsn, policy, bench.sandbox)
        bench.db.execute(
            "UPDATE retention.operations SET not_before = now() "
            "WHERE policy = %s AND state = 'pending'",
            (policy.name,),
        )
    by_resource = {
        op["resource"]: op
        for op in bench.db.execute(
            "SELECT * FROM retention.operations WHERE policy = %s AND object_id = 'obj-1'",
            (policy.name,),
        )
    }
    left = bench.db.execute(sql.SQL("SELECT count(*) AS n FROM {}").format(table(bench)))
    assert left.fetchone()["n"] == 1, "the row stays"  # type: ignore[index]
    dead = by_resource["thumbnails"]
    record = explain(bench.db, by_resource["object"]["operation_key"])
    return [
        dead["state"],
        dead["failure_class"],
        by_resource["object"]["state"],
        record["next"]["detail"],
    ]


@INTEGRATION.of("connection refused for every call")
def api_refuses_connections(row: Row, bench: Bench) -> list[str]:
    """The states the operations are left in (the pause warnings are test_remote_edges')."""
    create_media_table(bench.db, bench.name, 4)
    policy = remote_policy(bench.name)
    enqueue_all(bench.db, policy)
    down = plain_sender(f"http://127.0.0.1:{free_port()}", 1)  # nothing listens: refused
    with connect_dsn(bench.dsn) as conn:
        work_operations(conn, OperationsKind(policy, down), budget_seconds=0.5)
    return sorted({op["state"] for op in ops(bench.db, policy).values()})


@INTEGRATION.of("a 307 redirect to another host")
def api_redirects(row: Row, bench: Bench) -> list[str]:
    elsewhere = SandboxServer(0).start()
    bench.later.callback(elsewhere.stop)
    create_media_table(bench.db, bench.name, 1)
    bench.sandbox.state.configure(redirect={"obj-1": elsewhere.url + "/v1/assets/obj-1"})
    policy = remote_policy(bench.name, backoff_base_seconds=60, backoff_max_seconds=60)
    enqueue_all(bench.db, policy)
    work_pass(bench.dsn, policy, bench.sandbox)
    return [ledger_of(bench, policy, "obj-1")["failure_class"]]


@INTEGRATION.of(
    "rate-limit headers that contradict themselves (`X-RateLimit-Remaining: 50` with "
    "`X-RateLimit-Limit: 40`)"
)
def api_contradicts_its_rate_headers(row: Row, bench: Bench) -> list[str]:
    """The summary's key and its one line; the scope's rate is test_rate_headers'."""
    create_media_table(bench.db, bench.name, 3)
    bench.sandbox.state.configure(
        extra_headers={"X-RateLimit-Remaining": "50", "X-RateLimit-Limit": "40"}
    )
    policy = remote_policy(bench.name)
    enqueue_all(bench.db, policy)
    work_pass(bench.dsn, policy, bench.sandbox)
    summary = reconcile_run(bench.db, policy, "run-1")
    return [key for key in summary if key.startswith("rate_limit")] + [
        summary["rate_limit_headers_note"]
    ]


# --- event delivery --------------------------------------------------------------------------


def task_id_of(make_task: Callable[[Policy], Any], policy: Policy) -> str:
    """The id of the task a DAG factory function adds for the policy."""
    from airflow.sdk import DAG

    with DAG("retention_catalogue", schedule=None):
        return str(make_task(policy).operator.task_id)


@INTEGRATION.of("events that exhaust `max_attempts`")
def events_go_dead(row: Row, bench: Bench) -> list[str]:
    from retention.airflow.dag_factory import deliver_events_task

    receiver = bench.event_receiver()
    receiver.statuses = [500, 500]
    policy = notifying_policy(bench.name, max_attempts=1)
    delete_remotely(bench.db, bench.dsn, policy, 2, bench.sandbox)
    with pytest.raises(DeliveryIncomplete) as failed:
        deliver_events_step(policy, "run-1", dry_run=False)
    return [task_id_of(deliver_events_task, policy), str(failed.value)]


# --- the checks -----------------------------------------------------------------------------


@pytest.mark.parametrize("row", INTEGRATION.rows(), ids=row_id)
def test_each_quote_is_what_the_code_shows_for_its_input(
    row: Row,
    db: Connection,
    test_dsn: str,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
    api: dict[str, str],
    sandbox_api: SandboxServer,
) -> None:
    sandbox_api.state.reset()
    with ExitStack() as later:
        bench = Bench(db, test_dsn, unique_name, api, sandbox_api, monkeypatch, later)
        shown = INTEGRATION[row.input](row, bench)
    problems = disagreements(row.quotes, shown)
    assert not problems, "\n".join([f"row {row.input!r}:", *problems])


def test_every_row_that_quotes_something_has_one_producer() -> None:
    """A new row, or a row whose input was reworded, is checked before it is trusted."""
    quoting = {row.input for row in quoting_rows()}
    assert sorted(quoting - set(UNIT) - set(INTEGRATION)) == [], "rows without a producer"
    assert sorted(set(UNIT) & set(INTEGRATION)) == [], "rows with two producers"
    assert sorted((set(UNIT) | set(INTEGRATION)) - quoting) == [], "producers without a row"
