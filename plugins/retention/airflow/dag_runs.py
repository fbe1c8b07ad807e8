"""The runs of a DAG that Airflow will not start yet, as a task reads them.

A run triggered with a logical date still to come stays queued or "running" with
every task "No Status" until that date (the scheduler logs "Logical date is in
future"). The Retention view reads such runs from Airflow's metadata database
(``AirflowAccess.future_runs``); a task has none, and the Task SDK lists no runs,
so the lag alert's ``send_alerts`` asks the public REST API through
``retention_airflow_api`` (``retention.airflow.rest``): ``GET
/api/v2/dags/{dag_id}/dagRuns`` with ``state=queued&state=running`` and
``logical_date_gt`` = now, oldest logical date first.
"""

from __future__ import annotations

import datetime as dt
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import requests

from retention.airflow.rest import ApiUnreadable, answer, api_settings, get, token
from retention.rows.cutoff import FutureRun
from retention.runs.status import ACTIVE_AIRFLOW_STATES

MAX_RUNS = 50  # one page: the alert names a few of them and counts the rest


@dataclass(frozen=True)
class FutureRuns:
    """One page of the runs Airflow will not start yet, and how many there are in all."""

    runs: tuple[FutureRun, ...]
    total: int  # the API's total_entries: all such runs, not only the page's


def read_future_runs(dag_id: str, now: dt.datetime) -> FutureRuns:
    """The DAG's queued or running runs whose logical date is after ``now``, through the
    REST API the connection ``retention_airflow_api`` names."""
    base, login, password = api_settings(user_may=f"read the DAG runs of {dag_id}")
    return api_future_runs(base, login, password, dag_id, now)


def api_future_runs(
    base_url: str,
    login: str,
    password: str,
    dag_id: str,
    now: dt.datetime,
    session: requests.Session | Any | None = None,
) -> FutureRuns:
    """``GET /api/v2/dags/{dag_id}/dagRuns`` for the runs Airflow will not start yet (the
    first :data:`MAX_RUNS`, and the count of all of them)."""
    path = f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns"
    with nullcontext(session) if session is not None else requests.Session() as http:
        try:
            access_token = token(http, base_url, login, password)
            params = [("state", state) for state in ACTIVE_AIRFLOW_STATES] + [
                ("logical_date_gt", now.isoformat()),
                ("order_by", "logical_date"),
                ("limit", str(MAX_RUNS)),
            ]
            body = answer(get(http, base_url, access_token, path, params=params), f"GET {path}")
        except requests.RequestException as failed:
            raise ApiUnreadable(f"{type(failed).__name__}: {failed}") from None
    runs = body.get("dag_runs")
    if not isinstance(runs, list):
        raise ApiUnreadable(f"GET {path} answered without a list of dag_runs")
    found = tuple(_future_run(dag_id, run, path) for run in runs)
    total = body.get("total_entries")
    return FutureRuns(found, max(total, len(found)) if type(total) is int else len(found))


def _future_run(dag_id: str, run: Any, path: str) -> FutureRun:
    try:
        logical = dt.datetime.fromisoformat(str(run["logical_date"]))
        return FutureRun(
            dag_id=str(run.get("dag_id") or dag_id),
            run_id=str(run["dag_run_id"]),
            logical_date=logical if logical.tzinfo else logical.replace(tzinfo=dt.UTC),
            state=str(run.get("state")),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as bad:
        raise ApiUnreadable(
            f"GET {path} answered a run without its id or logical date: {bad!r}"
        ) from None
