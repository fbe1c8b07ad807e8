"""Airflow connections turned into what the lower layers take: a psycopg connection,
an HTTP sender, a signing secret. Hooks resolve ``AIRFLOW_CONN_*`` variables,
secrets backends and the metadata database the same way a task would."""

from __future__ import annotations

import psycopg

from retention.db.connection import Connection, configure
from retention.queue.http import HttpSender


def postgres(conn_id: str) -> Connection:
    """A psycopg 3 connection for an Airflow Postgres connection id."""
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    raw = PostgresHook(postgres_conn_id=conn_id).get_conn()
    if not isinstance(raw, psycopg.Connection):
        raise RuntimeError(
            "the Postgres provider returned a psycopg2 connection; install psycopg 3 "
            "(psycopg[binary]) and SQLAlchemy 2 as requirements.txt pins"
        )
    return configure(raw)


def http_sender(conn_id: str, timeout_seconds: float) -> HttpSender:
    """A sender over the provider's HttpHook session (host, scheme, auth, extra headers)."""
    from airflow.providers.http.hooks.http import HttpHook

    hook = HttpHook(http_conn_id=conn_id)
    return HttpSender(hook.get_conn(), hook.url_from_endpoint, timeout_seconds)


def signing_secret(conn_id: str) -> str:
    """The receiver's ``whsec_`` signing secret: the connection's password."""
    from airflow.sdk import BaseHook

    return BaseHook.get_connection(conn_id).password or ""
