"""Alerts against the real Postgres and a real HTTP receiver on loopback: once per run."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from psycopg import sql

from devtools.plans import CUTOFF
from devtools.receiver import Receiver
from retention.airflow.alerts import AlertsNotSent, deadline_alert_of, send_alerts_step
from retention.airflow.dag_runs import MAX_RUNS
from retention.alerts.delivery import read_run_facts
from retention.db.connection import APPLICATION_NAME, Connection, connect_dsn
from retention.evidence.reconcile import reconcile_run
from retention.policy import Policy
from retention.rows.partitions import drop_expired_partitions
from tests.integration.test_partitions import (
    MONTHS,
    detach_by_hand,
    oid_of,
    partitioned,
    record,
    run_windows,
)
from tests.support.airflow_pools import AirflowPools
from tests.support.policies import make_policy
from tests.support.tables import create_table, new, old, plan

CONN_ID = "ops_alerts"
RUN_ID = "run-1"


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    server = Receiver().start()
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", server.connection())
    yield server
    server.answer_gate.set()
    server.shutdown()
    server.server_close()


def dirty_run(db: Connection, name: str, **alerts: Any) -> Policy:
    """30 eligible rows planned into 3 windows, none deleted, reconciled: a dirty run."""
    create_table(db, name, [(i, 1, old() if i <= 30 else new()) for i in range(1, 41)])
    policy = make_policy(name, window_rows=10, batch_rows=5, alerts=alerts or {"on_dirty": CONN_ID})
    plan(db, policy, run_id=RUN_ID)
    assert reconcile_run(db, policy, RUN_ID)["status"] == "dirty"
    return policy


def ledger(db: Connection, policy: str) -> list[dict[str, Any]]:
    return db.execute(
        "SELECT kind, conn_id, status, attempts, status_code, error FROM retention.alerts "
        "WHERE policy = %s ORDER BY kind",
        (policy,),
    ).fetchall()


def send(policy: Policy, failed: tuple[str, ...] = ("reconcile",)) -> dict[str, Any]:
    return send_alerts_step(policy, run_id=RUN_ID, failed_tasks=failed, url=None, dry_run=False)


def test_a_dirty_run_is_told_once_however_often_send_alerts_runs(
    db: Connection, unique_name: str, receiver: Receiver
) -> None:
    policy = dirty_run(db, unique_name, on_dirty=CONN_ID, on_failure=CONN_ID)
    first = send(policy)
    assert first["alerts"] == [
        {"kind": "dirty", "conn_id": CONN_ID, "state": "sent", "status_code": 200}
    ]
    for _ in range(2):  # a retried task, a cleared task
        assert send(policy)["alerts"] == [
            {"kind": "dirty", "conn_id": CONN_ID, "state": "already_claimed"}
        ]
    assert len(receiver.received) == 1
    [message] = receiver.received
    body = message["json"]
    assert (body["type"], body["kind"], body["policy"], body["run_id"]) == (
        "retention.alert",
        "dirty",
        unique_name,
        RUN_ID,
    )
    assert body["figures"]["rows_remaining"] == 30
    assert len(body["figures"]["windows_unfinished"]) == 3
    assert body["message"].startswith(
        f"retention__{unique_name} run {RUN_ID} is dirty: 30 rows older than cutoff "
        f"{CUTOFF.isoformat()} remain in public.{unique_name} (0 deleted)."
    )
    assert body["runbook"]["link"] == "docs/runbook.md#a-dirty-run"
    assert message["headers"]["content-type"] == "application/json"
    assert ledger(db, unique_name) == [
        {
            "kind": "dirty",
            "conn_id": CONN_ID,
            "status": "sent",
            "attempts": 1,
            "status_code": 200,
            "error": None,
        }
    ]


def test_a_refused_alert_is_sent_again_by_the_retry_and_then_never(
    db: Connection, unique_name: str, receiver: Receiver
) -> None:
    policy = dirty_run(db, unique_name)
    receiver.statuses = [503]
    with pytest.raises(
        AlertsNotSent, match=rf"dirty to connection '{CONN_ID}': HTTP 503\. A retry"
    ):
        send(policy)
    assert ledger(db, unique_name)[0]["status"] == "failed"
    assert send(policy)["alerts"][0]["state"] == "sent"
    assert send(policy)["alerts"][0]["state"] == "already_claimed"
    assert [r["status"] for r in receiver.received] == [503, 200]
    row = ledger(db, unique_name)[0]
    assert (row["status"], row["attempts"], row["status_code"], row["error"]) == (
        "sent",
        2,
        200,
        None,
    )


def test_an_unreachable_receiver_reads_no_response(
    db: Connection, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = closed.server_address[1]
    closed.server_close()  # nothing listens on the port any more
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}",
        json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": port}),
    )
    policy = dirty_run(db, unique_name)
    with pytest.raises(AlertsNotSent, match="no response"):
        send(policy)
    assert ledger(db, unique_name)[0]["error"] == "no response (connection refused or reset)"


def test_duplicate_send_alerts_tasks_at_once_tell_once(
    db: Connection, unique_name: str, receiver: Receiver
) -> None:
    policy = dirty_run(db, unique_name)
    receiver.answer_gate.clear()  # the first sender's answer waits until all have claimed
    start = threading.Barrier(4)
    finished = threading.Condition()
    results: list[str] = []

    def duplicate() -> None:
        start.wait(30)
        try:
            state = send(policy)["alerts"][0]["state"]
        except Exception as failed:  # reported through results
            state = repr(failed)
        with finished:
            results.append(state)
            finished.notify_all()

    threads = [threading.Thread(target=duplicate) for _ in range(4)]
    for thread in threads:
        thread.start()
    with finished:  # three lost the claim while the winner's POST is still unanswered
        assert finished.wait_for(lambda: len(results) == 3, timeout=60), results
    receiver.answer_gate.set()
    for thread in threads:
        thread.join(60)
    assert sorted(results) == ["already_claimed"] * 3 + ["sent"]
    assert len(receiver.received) == 1


def test_a_slack_connection_gets_slacks_shape_on_its_endpoint_and_no_extra_headers(
    db: Connection, unique_name: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_OPS_SLACK",
        receiver.connection(format="slack", endpoint="/services/T0/B0/xyz", team="ops"),
    )
    policy = dirty_run(db, unique_name, on_dirty="ops_slack")
    send(policy)
    [message] = receiver.received
    assert message["path"] == "/services/T0/B0/xyz"
    assert set(message["json"]) == {"text", "blocks"}
    assert message["json"]["text"].startswith(f"Retention {unique_name}: dirty run: ")
    assert "format" not in message["headers"]
    assert "endpoint" not in message["headers"]
    assert message["headers"]["team"] == "ops", "other extras stay headers, as HttpHook sends them"


def test_a_bad_format_extra_is_named_and_recorded_as_unsent(
    db: Connection, unique_name: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_OPS_TEAMS", receiver.connection(format="teams"))
    policy = dirty_run(db, unique_name, on_dirty="ops_teams")
    with pytest.raises(AlertsNotSent, match="extra 'format' is 'teams'; use 'slack'"):
        send(policy)
    assert receiver.received == []


def test_lag_and_new_dead_letters_are_read_from_the_database(
    db: Connection, unique_name: str
) -> None:
    policy = dirty_run(db, unique_name)
    planned = db.execute(
        "SELECT planned_at FROM retention.runs WHERE policy = %s AND run_id = %s",
        (unique_name, RUN_ID),
    ).fetchone()
    assert planned is not None
    for key, dead_since in (
        ("before", planned["planned_at"] - dt.timedelta(hours=1)),
        ("now", None),
    ):
        db.execute(
            "INSERT INTO retention.operations (operation_key, policy, policy_revision, "
            "table_name, row_key, object_id, version, state, failure_class, updated_at) "
            "VALUES (%s, %s, 1, %s, 1, 'obj', '1', 'dead', 'rejected', coalesce(%s, now()))",
            (f"{unique_name}-{key}", unique_name, policy.table, dead_since),
        )
    now = CUTOFF + dt.timedelta(days=40)
    facts = read_run_facts(
        db, policy, RUN_ID, failed_tasks=("reconcile",), dry_run=False, url=None, now=now
    )
    # The oldest eligible row is a day older than the cutoff, so it became eligible
    # retain_days after that, and has waited until `now` since.
    oldest = CUTOFF - dt.timedelta(days=1)
    expected = (now - (oldest + dt.timedelta(days=policy.retain_days))).total_seconds() / 3600
    assert facts.lag_hours == pytest.approx(expected)
    assert (facts.dead.new_operations, facts.dead.dead_operations) == (1, 2)
    assert facts.dead.new_operations_by_class == {"rejected": 1}
    assert facts.summary is not None
    assert facts.summary["status"] == "dirty"


@pytest.fixture
def airflow_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[AirflowPools]:
    """Airflow's login and DAG runs through ``retention_airflow_api``, as send_alerts reads
    them in a task."""
    server = AirflowPools("default_pool", 128).start()
    monkeypatch.setenv("AIRFLOW_CONN_RETENTION_AIRFLOW_API", server.connection())
    yield server
    server.stop()


def dag_run(dag_id: str, run_id: str, logical_date: dt.datetime, state: str) -> dict[str, Any]:
    return {
        "dag_id": dag_id,
        "dag_run_id": run_id,
        "logical_date": logical_date.isoformat().replace("+00:00", "Z"),
        "state": state,
    }


def test_the_lag_alert_names_a_run_airflow_will_not_start_before_its_future_date(
    db: Connection, unique_name: str, receiver: Receiver, airflow_api: AirflowPools
) -> None:
    """Read from Airflow's REST API (a task has no metadata database): the DAG's queued or
    running runs whose logical date is still to come, and only those."""
    policy = dirty_run(db, unique_name, on_lag=CONN_ID, lag_minutes=60)
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    ahead = today + dt.timedelta(days=21)
    airflow_api.dag_runs = [
        dag_run(policy.dag_id, RUN_ID, today - dt.timedelta(days=1), "running"),
        dag_run(policy.dag_id, "manual__typo", ahead, "running"),
        dag_run(policy.dag_id, "manual__done", ahead, "success"),
        dag_run("retention__other", "manual__elsewhere", ahead, "queued"),
    ]
    assert send(policy)["alerts"] == [
        {"kind": "lag", "conn_id": CONN_ID, "state": "sent", "status_code": 200}
    ]
    [message] = receiver.received
    body = message["json"]
    assert body["kind"] == "lag"
    text = body["message"]
    assert f"retention__{unique_name} run {RUN_ID} left rows behind" in text
    assert (
        f" Not started by Airflow: run manual__typo has the logical date {ahead:%Y-%m-%d} "
        "(21 days ahead): Airflow starts none of its tasks before then" in text
    )
    assert "Mark run manual__typo failed" in text
    for other in (f"run {RUN_ID} has the logical date", "manual__done", "manual__elsewhere"):
        assert other not in text
    assert body["figures"]["future_runs"] == [
        {"run_id": "manual__typo", "logical_date": ahead.isoformat()}
    ]
    assert ("POST", "/auth/token") in airflow_api.requests, "read through the REST API"


def test_the_lag_alert_counts_every_future_run_and_holds_no_connection_while_reading_them(
    db: Connection,
    unique_name: str,
    test_dsn: str,
    receiver: Receiver,
    airflow_api: AirflowPools,
) -> None:
    """More runs than one page of the REST API: the alert names five and counts the rest
    from the API's total_entries, not from the page. While Airflow is asked (up to its
    timeouts), send_alerts holds no connection to the policy's database."""
    policy = dirty_run(db, unique_name, on_lag=CONN_ID, lag_minutes=60)
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    airflow_api.dag_runs = [
        dag_run(policy.dag_id, f"manual__{n}", today + dt.timedelta(days=10 + n), "queued")
        for n in range(MAX_RUNS + 5)
    ]
    held: list[int] = []

    def sessions_of_retention() -> None:
        with connect_dsn(test_dsn) as probe:
            row = probe.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = %s AND pid NOT IN (pg_backend_pid(), %s)",
                (APPLICATION_NAME, db.info.backend_pid),
            ).fetchone()
        held.append(row["n"])

    airflow_api.on_dag_runs = sessions_of_retention
    assert send(policy)["alerts"][0]["state"] == "sent"
    [message] = receiver.received
    assert message["json"]["message"].endswith(f" And {MAX_RUNS} more such run(s) of the DAG.")
    assert message["json"]["figures"]["future_runs_total"] == MAX_RUNS + 5
    assert held == [0], "no connection of send_alerts is open while Airflow is asked"


def test_the_dag_runs_query_uses_parameters_the_installed_airflow_knows() -> None:
    """An unknown query parameter is ignored by Airflow, not refused: a misspelt filter
    would list every run. The stand-in above honours these names; so must Airflow."""
    from airflow.api_fastapi.core_api.routes.public.dag_run import get_dag_runs
    from fastapi.dependencies.utils import get_dependant, get_flat_dependant

    from retention.airflow.dag_runs import FutureRuns, api_future_runs

    sent: list[tuple[str, str]] = []

    class Session:
        def post(self, url: str, **kwargs: Any) -> Any:
            return answer(201, {"access_token": "t"})

        def get(self, url: str, **kwargs: Any) -> Any:
            sent.extend(kwargs["params"])
            return answer(200, {"dag_runs": []})

    assert api_future_runs(
        "http://api", "u", "p", "d", dt.datetime.now(dt.UTC), Session()
    ) == FutureRuns((), 0)
    route = get_flat_dependant(get_dependant(path="/dags/{dag_id}/dagRuns", call=get_dag_runs))
    known = {param.alias for param in route.query_params}
    assert {name for name, _ in sent} <= known
    assert {name for name, _ in sent} >= {"state", "logical_date_gt"}


def answer(status: int, body: Any) -> Any:
    import requests

    response = requests.Response()
    response.status_code = status
    response._content = json.dumps(body).encode()
    return response


def test_the_lag_alert_goes_without_those_runs_when_airflow_does_not_answer(
    db: Connection,
    unique_name: str,
    receiver: Receiver,
    airflow_api: AirflowPools,
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = dirty_run(db, unique_name, on_lag=CONN_ID, lag_minutes=60)
    airflow_api.user = ("pools", "not the password")  # the connection's login is refused
    airflow_api.dag_runs = [
        dag_run(policy.dag_id, "manual__typo", dt.datetime(2099, 1, 1, tzinfo=dt.UTC), "running")
    ]
    with caplog.at_level("WARNING", logger="retention.airflow.alerts"):
        assert send(policy)["alerts"][0]["state"] == "sent"
    [message] = receiver.received
    assert "left rows behind" in message["json"]["message"]
    assert "manual__typo" not in message["json"]["message"]
    [warning] = [r.getMessage() for r in caplog.records if "will not start yet" in r.getMessage()]
    assert "POST /auth/token as 'pools' answered 401" in warning


def test_the_alerts_go_out_whatever_reading_airflows_runs_raised(
    db: Connection,
    unique_name: str,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Reading the runs Airflow holds back only adds a line to the lag alert: an error of
    any kind there (a secrets backend refusing the connection raises PermissionError, not
    an Airflow error) is logged with its traceback, and every alert still goes out."""
    from retention.airflow import alerts as alerts_step

    def refused(dag_id: str, now: dt.datetime) -> None:
        raise PermissionError("secrets backend: access to retention_airflow_api denied")

    monkeypatch.setattr(alerts_step, "read_future_runs", refused)
    policy = dirty_run(db, unique_name, on_lag=CONN_ID, lag_minutes=60)
    with caplog.at_level("WARNING", logger="retention.airflow.alerts"):
        assert send(policy)["alerts"][0]["state"] == "sent"
    [message] = receiver.received
    assert "left rows behind" in message["json"]["message"]
    [logged] = [r for r in caplog.records if "will not start yet" in r.getMessage()]
    assert "access to retention_airflow_api denied" in logged.getMessage()
    assert logged.exc_info is not None, "an unexpected error keeps its traceback"


def test_the_deadline_callback_runs_as_the_triggerer_runs_it_and_tells_once(
    db: Connection, unique_name: str, receiver: Receiver
) -> None:
    from airflow.triggers.callback import CallbackTrigger

    policy = dirty_run(db, unique_name, on_deadline=CONN_ID, deadline_minutes=30, on_dirty=CONN_ID)
    alert = deadline_alert_of(policy)
    context = {  # what the scheduler hands deadline callbacks (Deadline.handle_miss)
        "dag_run": {
            "dag_id": policy.dag_id,
            "dag_run_id": RUN_ID,
            "state": "running",
            "queued_at": "2026-03-01T00:00:05+00:00",
        },
        "deadline": {
            "id": "d-1",
            "deadline_time": dt.datetime(2026, 3, 1, 0, 30, 5, tzinfo=dt.UTC),
        },
    }

    async def run_trigger() -> list[dict[str, Any]]:
        trigger = CallbackTrigger(
            callback_path=alert.callback.path,
            callback_kwargs={**alert.callback.kwargs, "context": context},
        )
        return [event.payload async for event in trigger.run()]

    first = asyncio.run(run_trigger())
    assert [e["state"] for e in first] == ["running", "success"], first
    # Text, as Airflow's callback.output column takes (a dict there stops the triggerer).
    assert json.loads(first[-1]["body"]) == {
        "kind": "deadline",
        "conn_id": CONN_ID,
        "state": "sent",
        "status_code": 200,
    }
    again = asyncio.run(run_trigger())
    assert json.loads(again[-1]["body"])["state"] == "already_claimed"
    [message] = receiver.received
    body = message["json"]
    assert (body["kind"], body["run_id"]) == ("deadline", RUN_ID)
    assert body["message"] == (
        f"retention__{unique_name} run {RUN_ID} has not finished 30 minutes after it was "
        "queued (queued 2026-03-01T00:00:05+00:00, deadline 2026-03-01 00:30:05+00:00); it is "
        "running. 0 of 3 windows are done, 0 rows deleted of about 30 planned."
    )
    assert body["runbook"]["link"] == (
        "docs/runbook.md#changing-batch-size-and-pool-slots-mid-flight"
    )


def test_an_undefined_connection_is_named_and_nothing_is_claimed(
    db: Connection, unique_name: str
) -> None:
    policy = dirty_run(db, unique_name, on_dirty="ops_nowhere")
    with pytest.raises(AlertsNotSent, match=r"dirty to connection 'ops_nowhere': .*ops_nowhere"):
        send(policy)
    assert ledger(db, unique_name) == [], "no claim without a usable connection: a retry sends"


def test_alert_rows_older_than_audit_days_are_purged(
    db: Connection, unique_name: str, receiver: Receiver
) -> None:
    policy = dirty_run(db, unique_name)
    db.execute(
        "INSERT INTO retention.alerts (policy, run_id, kind, conn_id, status, claimed_at, message)"
        " VALUES (%s, 'old-run', 'failure', %s, 'sent', now() - make_interval(days => %s), '{}'),"
        " (%s, 'recent-run', 'failure', %s, 'sent', now() - make_interval(days => %s), '{}')",
        (
            unique_name,
            CONN_ID,
            policy.audit_days + 1,
            unique_name,
            CONN_ID,
            policy.audit_days - 1,
        ),
    )
    assert send(policy)["purged_alert_rows"] == 1
    runs = db.execute(
        "SELECT run_id FROM retention.alerts WHERE policy = %s ORDER BY run_id", (unique_name,)
    ).fetchall()
    assert [r["run_id"] for r in runs] == ["recent-run", RUN_ID]


def test_an_abandoned_partition_drop_is_told_by_the_dirty_alert(
    db: Connection, unique_name: str, receiver: Receiver
) -> None:
    """The name of a detached partition now means another table: nothing is dropped, and
    the run that gives the drop up is dirty and says so to on_dirty."""
    partitioned(db, unique_name, MONTHS)
    policy = make_policy(unique_name, alerts={"on_dirty": CONN_ID})
    first = f"public.{unique_name}_20251201"
    oid = oid_of(db, first)
    detach_by_hand(db, unique_name, first)
    record(db, unique_name, first, "detached", oid=oid)
    db.execute(
        sql.SQL("ALTER TABLE {} RENAME TO kept_{}").format(sql.SQL(first), sql.SQL(unique_name))
    )
    db.execute(sql.SQL("CREATE TABLE {} (note text)").format(sql.SQL(first)))
    drop_expired_partitions(
        db, policy, RUN_ID, CUTOFF, column_type="timestamp with time zone", dry_run=False
    )
    assert run_windows(db, policy, run_id=RUN_ID)["status"] == "dirty"
    assert send(policy, failed=("reconcile",))["alerts"][0]["state"] == "sent"
    [message] = receiver.received
    text = message["json"]["message"]
    assert f"Partitions: {first}: its drop was abandoned: {first} now names a different" in text
    assert f"the table detached is now public.kept_{unique_name}" in text
    assert message["json"]["figures"]["partition_problems"]
