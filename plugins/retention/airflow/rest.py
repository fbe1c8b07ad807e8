"""A task's small client of Airflow's public REST API, through the connection
``retention_airflow_api``.

A task in Airflow 3 has no metadata database, and the Task SDK's execution API
lists neither pools nor DAG runs, so the tasks that need them ask the api-server
as any client does: a token from ``POST /auth/token`` for the connection's user,
then a GET with it. The connection holds the api-server's address and a user who
may read what is asked (a viewer will do). Pools (``retention.airflow.pools``) and
the runs Airflow will not start yet (``retention.airflow.dag_runs``) read through
it; every failure is an :class:`ApiUnreadable` naming what was asked and why, and
no caller fails its run for one.
"""

from __future__ import annotations

from typing import Any

import requests

AIRFLOW_API_CONN_ID = "retention_airflow_api"
TIMEOUT_SECONDS = (3.0, 10.0)  # to connect, to answer: an api-server that is down costs 3 s


class ApiUnreadable(RuntimeError):
    """Airflow's REST API did not answer what was asked; the message says why."""


def api_settings(user_may: str = "read pools") -> tuple[str, str, str]:
    """The api-server's base URL, and the user and password, of ``retention_airflow_api``
    (``user_may``: what its user must be allowed, for the message when it is missing)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(AIRFLOW_API_CONN_ID)
    except AirflowNotFoundException:
        raise ApiUnreadable(
            f"no connection {AIRFLOW_API_CONN_ID!r} (the api-server's URL, and a user who "
            f"may {user_may})"
        ) from None
    if not conn.host:
        raise ApiUnreadable(f"connection {AIRFLOW_API_CONN_ID!r} has no host")
    host = conn.host if "://" in conn.host else f"{conn.schema or 'http'}://{conn.host}"
    base = f"{host}:{conn.port}" if conn.port else host
    return base.rstrip("/"), conn.login or "", conn.password or ""


def token(
    http: requests.Session | Any,
    base_url: str,
    login: str,
    password: str,
    timeout: tuple[float, float] = TIMEOUT_SECONDS,
) -> str:
    """An access token of ``POST /auth/token`` for ``login``."""
    found = answer(
        http.post(
            f"{base_url}/auth/token",
            json={"username": login, "password": password},
            timeout=timeout,
            allow_redirects=False,
        ),
        f"POST /auth/token as {login!r}",
    ).get("access_token")
    if not isinstance(found, str):
        raise ApiUnreadable("POST /auth/token answered without an access_token")
    return found


def get(
    http: requests.Session | Any,
    base_url: str,
    access_token: str,
    path: str,
    *,
    params: list[tuple[str, str]] | None = None,
    timeout: tuple[float, float] = TIMEOUT_SECONDS,
) -> requests.Response:
    """``GET path`` with the token (the answer as it came: see :func:`answer`)."""
    return http.get(
        f"{base_url}{path}",
        params=params,
        headers={"Authorization": f"Bearer {access_token}"},
        timeout=timeout,
        allow_redirects=False,
    )


def answer(response: requests.Response, what: str) -> dict:
    """The JSON object of a 2xx answer; anything else is an ``ApiUnreadable`` naming it."""
    if not 200 <= response.status_code < 300:
        raise ApiUnreadable(f"{what} answered {response.status_code}: {response.text[:200]}")
    try:
        body = response.json()
    except ValueError:
        raise ApiUnreadable(f"{what} answered {response.status_code} without JSON") from None
    if not isinstance(body, dict):
        raise ApiUnreadable(f"{what} answered {type(body).__name__}, not a JSON object")
    return body
