"""The Airflow side of alerts: the ``send_alerts`` task, the Deadline Alert and its callback.

``with_alerts`` adds both to a policy's DAG when the policy has ``alerts:``:

- ``send_alerts`` runs after ``reconcile`` whatever happened
  (``trigger_rule=all_done``), reads the run's summary and the states of the
  run's task instances (``RuntimeTaskInstance.get_task_states`` through the
  task SDK), and sends each alert that fires once (see
  ``retention.alerts.delivery``). It then fails, naming what failed, when any
  task of the run failed: it is a leaf of the DAG, and a green leaf after a
  failed ``reconcile`` would turn a dirty run green. When the lag alert fires, it
  first reads the DAG's runs that Airflow will not start before their logical date
  (``retention.airflow.dag_runs``, through the REST API) so the message names them
  with the fix; unreadable, the alert goes without them.
- ``deadline_minutes`` becomes an Airflow ``DeadlineAlert`` measured from when
  the run was queued (``DeadlineReference.DAGRUN_QUEUED_AT``: a logical date
  would put a backfill of an old date past its deadline at once). Its callback
  is an ``AsyncCallback``, so the **triggerer** runs it when the scheduler
  finds the deadline missed: a deployment with deadlines needs a triggerer
  (``airflow standalone`` and Astro start one). The callback does its
  blocking work (connections, Postgres, the POST) in a worker thread, so it
  never stalls the triggerer's event loop.

Where a message goes is an Airflow HTTP connection: host (and port, scheme,
auth, headers) as usual, the extra ``endpoint`` as the path (default: the host
URL as it is) and the extra ``format`` (``slack`` for Slack's incoming-webhook
shape, else plain JSON). Neither extra is sent as a header.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from dataclasses import replace
from typing import Any

import psycopg
from airflow.sdk import (
    DAG,
    AsyncCallback,
    DeadlineAlert,
    DeadlineReference,
    TriggerRule,
    get_current_context,
    task,
)
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from retention.airflow.connections import api_base_url, http_sender, postgres
from retention.airflow.dag_runs import FutureRuns, read_future_runs
from retention.airflow.rest import ApiUnreadable
from retention.alerts.delivery import (
    ALERT_TIMEOUT_SECONDS,
    ENDPOINT_EXTRA,
    FAILED_STATES,
    FORMAT_EXTRA,
    AlertOutcome,
    purge_old_alerts,
    read_run_facts,
    read_run_progress,
    send_once,
)
from retention.alerts.messages import (
    Alert,
    MessageFormat,
    deadline_alert,
    decide_alerts,
    message_body,
    run_url,
)
from retention.policy.model import AlertsSpec, Policy
from retention.queue.http import HttpSender
from retention.runs.lease import holds_run_lease

log = logging.getLogger(__name__)

SEND_ALERTS_TASK = "send_alerts"
AFTER_TASK = "reconcile"


class AlertsNotSent(RuntimeError):
    """An alert's receiver did not take it; a retry of the task sends it again."""


class AlertTargetError(ValueError):
    """An alert connection's extras are not what this package reads."""


def alert_target(conn_id: str) -> tuple[HttpSender, str, MessageFormat]:
    """A sender for the connection, the path to POST to, and the message format."""
    from airflow.sdk import BaseHook

    extra = BaseHook.get_connection(conn_id).extra_dejson or {}
    fmt = str(extra.get(FORMAT_EXTRA, "json")).lower()
    if fmt not in ("json", "slack"):
        raise AlertTargetError(
            f"connection {conn_id!r}: extra {FORMAT_EXTRA!r} is {fmt!r}; use 'slack' for "
            "Slack's incoming-webhook shape or 'json' (the default) for a plain JSON object"
        )
    endpoint = str(extra.get(ENDPOINT_EXTRA) or "")
    sender = http_sender(
        conn_id, ALERT_TIMEOUT_SECONDS, not_headers=frozenset({FORMAT_EXTRA, ENDPOINT_EXTRA})
    )
    return sender, endpoint, fmt  # type: ignore[return-value]


def deliver(
    conn: Any, alert: Alert, *, policy: str, dag_id: str, run_id: str, url: str | None
) -> AlertOutcome:
    """Send one alert once, through its connection; a bad connection is a failed send."""
    try:
        sender, endpoint, fmt = alert_target(alert.conn_id)
    except Exception as bad:  # a missing or malformed connection: recorded, never hidden
        log.exception("alert %s: connection %r is unusable", alert.kind, alert.conn_id)
        return AlertOutcome(alert.kind, alert.conn_id, "failed", error=f"{bad}")
    body = message_body(alert, policy=policy, dag_id=dag_id, run_id=run_id, url=url, fmt=fmt)
    try:
        return send_once(
            conn, sender, endpoint=endpoint, policy=policy, run_id=run_id, alert=alert, body=body
        )
    finally:
        sender.close()


def base_url() -> str | None:
    """The API server's public URL (``[api] base_url``), for links to the run."""
    return api_base_url()


def failed_tasks_of(context: Any) -> tuple[str, ...]:
    """Task instances of the current run that failed or could not run (mapped ones as
    ``task_<index>``), other than ``send_alerts`` itself."""
    run_id = context["run_id"]
    states = context["ti"].get_task_states(dag_id=context["dag"].dag_id, run_ids=[run_id])
    return tuple(
        sorted(
            name
            for name, state in (states.get(run_id) or {}).items()
            if state in FAILED_STATES and name != SEND_ALERTS_TASK
        )
    )


def send_alerts_step(
    policy: Policy,
    *,
    run_id: str,
    failed_tasks: tuple[str, ...],
    url: str | None,
    dry_run: bool,
) -> dict[str, Any]:
    """Decide and send the run's alerts; raise :class:`AlertsNotSent` if one did not go out."""
    assert policy.alerts is not None
    remote = policy.remote is not None
    with postgres(policy.postgres_conn_id) as conn:
        facts = read_run_facts(
            conn, policy, run_id, failed_tasks=failed_tasks, dry_run=dry_run, url=url
        )
    alerts = decide_alerts(policy.alerts, facts, remote=remote)
    if any(alert.kind == "lag" for alert in alerts):  # name what Airflow holds back
        # read without holding a database connection: the REST API may take its timeouts
        future = future_runs_of(policy.dag_id, facts.now)
        facts = replace(facts, future_runs=future.runs, future_runs_total=future.total)
        alerts = decide_alerts(policy.alerts, facts, remote=remote)
    try:
        with postgres(policy.postgres_conn_id) as conn:
            outcomes = [
                deliver(
                    conn, alert, policy=policy.name, dag_id=policy.dag_id, run_id=run_id, url=url
                )
                for alert in alerts
            ]
            purged = purge_old_alerts(conn, policy.name, policy.audit_days)
    except (psycopg.OperationalError, AirflowException) as unreachable:
        # the connection was given back while Airflow was asked: if it cannot be had again,
        # say what was not sent (the alert ledger claims each alert inside deliver, so a
        # retry decides and sends them again, never twice)
        raise AlertsNotSent(
            f"policy {policy.name!r}: {len(alerts)} alert(s) decided but not sent (or not all): "
            f"the database of connection {policy.postgres_conn_id!r} did not answer: "
            f"{unreachable}. A retry of send_alerts sends them (alerts already sent are not "
            "repeated)."
        ) from unreachable
    for outcome in outcomes:
        log.info("alert %s to %s: %s", outcome.kind, outcome.conn_id, outcome.state)
    failed = [o for o in outcomes if o.state == "failed"]
    if failed:
        raise AlertsNotSent(
            f"policy {policy.name!r}: alert(s) not taken by their receivers: "
            + "; ".join(f"{o.kind} to connection {o.conn_id!r}: {o.error}" for o in failed)
            + ". A retry of send_alerts sends them again (alerts already sent are not repeated)."
        )
    return {"alerts": [o.as_dict() for o in outcomes], "purged_alert_rows": purged}


def future_runs_of(dag_id: str, now: dt.datetime | None) -> FutureRuns:
    """The DAG's runs Airflow will not start before their logical date, for the lag alert
    (read through ``retention_airflow_api``); none when they cannot be read, and the log
    says why: the alert goes out without them."""
    unread = (
        "lag alert of %s: the runs Airflow will not start yet were not read, so the "
        "alert does not name them: %s"
    )
    try:
        return read_future_runs(dag_id, now or dt.datetime.now(dt.UTC))
    except (ApiUnreadable, AirflowException) as unreadable:  # the alert matters more
        log.warning(unread, dag_id, unreadable)
    except Exception as unexpected:  # a secrets backend's refusal, a bug: alerts still go out
        log.exception(unread, dag_id, unexpected)
    return FutureRuns((), 0)


def alerts_doc(spec: AlertsSpec) -> str:
    """The alerts row of the DAG docs' settings table: what goes where, and when."""
    when = {
        "lag": f" (past {spec.lag_minutes or 0:g} min)",
        "deadline": f" ({spec.deadline_minutes or 0:g} min after queued, by the triggerer)",
    }
    parts = [f"{kind}{when.get(kind, '')} → `{conn}`" for kind, conn in spec.targets().items()]
    return "; ".join(parts) + f"; sent once per run by `{SEND_ALERTS_TASK}`"


def with_alerts(dag: DAG, policy: Policy) -> DAG:
    """The policy's DAG with ``send_alerts`` after ``reconcile`` and its deadline alert
    (unchanged when the policy has no ``alerts:``)."""
    spec = policy.alerts
    if spec is None:
        return dag
    if spec.deadline_minutes is not None and spec.on_deadline is not None:
        dag.deadline = deadline_alert_of(policy)

    # multiple_outputs=False: one XCom, not one per key of the returned dict
    @task(task_id=SEND_ALERTS_TASK, trigger_rule=TriggerRule.ALL_DONE, multiple_outputs=False)
    def send_alerts() -> dict[str, Any]:
        context = get_current_context()
        failed = failed_tasks_of(context)
        sent = send_alerts_step(
            policy,
            run_id=context["run_id"],
            failed_tasks=failed,
            url=run_url(base_url(), policy.dag_id, context["run_id"]),
            dry_run=bool(context["params"].get("dry_run")),
        )
        if failed:  # a leaf that succeeded would turn the failed run green
            raise AirflowFailException(
                f"{policy.dag_id} run {context['run_id']}: task(s) {', '.join(failed)} failed; "
                f"the alerts were sent ({sent['alerts']}). The run stays failed."
            )
        return sent

    with dag:
        dag.get_task(AFTER_TASK) >> send_alerts()
    return dag


def deadline_alert_of(policy: Policy) -> DeadlineAlert:
    """The policy's Deadline Alert: ``deadline_minutes`` after the run was queued."""
    spec = policy.alerts
    assert spec is not None
    assert spec.deadline_minutes is not None
    assert spec.on_deadline is not None
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=dt.timedelta(minutes=spec.deadline_minutes),
        callback=AsyncCallback(
            on_deadline_missed,
            kwargs={
                "policy": policy.name,
                "postgres_conn_id": policy.postgres_conn_id,
                "conn_id": spec.on_deadline,
                "deadline_minutes": spec.deadline_minutes,
            },
        ),
        name=f"{policy.dag_id} deadline",
    )


async def on_deadline_missed(
    policy: str,
    postgres_conn_id: str,
    conn_id: str,
    deadline_minutes: float,
    context: dict[str, Any] | None = None,
) -> str:
    """Deadline Alert callback (run by the triggerer): tell ``on_deadline`` the run is late.

    ``context`` is what the scheduler gives deadline callbacks: the DAG run (as
    the REST API's JSON) and the deadline (``id``, ``deadline_time``). The
    result is one line of text: Airflow stores it in a text column
    (``callback.output``), and a dict there stops the triggerer (Airflow 3.3.2).
    """
    outcome = await asyncio.to_thread(
        send_deadline_alert,
        policy=policy,
        postgres_conn_id=postgres_conn_id,
        conn_id=conn_id,
        deadline_minutes=deadline_minutes,
        context=context or {},
    )
    return json.dumps(outcome)


def send_deadline_alert(
    *,
    policy: str,
    postgres_conn_id: str,
    conn_id: str,
    deadline_minutes: float,
    context: dict[str, Any],
) -> dict[str, Any]:
    """The blocking part of the deadline callback: read the run's progress, send once."""
    dag_run = dict(context.get("dag_run") or {})
    deadline = context.get("deadline") or {}
    run_id = str(dag_run.get("dag_run_id") or dag_run.get("run_id") or "")
    dag_id = str(dag_run.get("dag_id") or f"retention__{policy}")
    if not run_id:
        raise ValueError(f"deadline callback of policy {policy!r}: the context names no run")
    deadline_time = deadline.get("deadline_time")
    url = run_url(base_url(), dag_id, run_id)
    with postgres(postgres_conn_id) as conn:
        alert = deadline_alert(
            conn_id,
            policy=policy,
            dag_id=dag_id,
            run_id=run_id,
            deadline_minutes=deadline_minutes,
            dag_run=dag_run,
            deadline_time=None if deadline_time is None else str(deadline_time),
            progress=read_run_progress(conn, policy, run_id),
            waiting_for=holds_run_lease(conn, policy, run_id),
            now=dt.datetime.now(dt.UTC),
        )
        outcome = deliver(conn, alert, policy=policy, dag_id=dag_id, run_id=run_id, url=url)
    if outcome.state == "failed":
        raise AlertsNotSent(
            f"policy {policy!r}: the deadline alert to connection {conn_id!r} was not "
            f"taken: {outcome.error}"
        )
    return outcome.as_dict()
