"""Airflow connections turned into what the lower layers take: a psycopg connection,
an HTTP sender, a signing secret. Hooks resolve ``AIRFLOW_CONN_*`` variables,
secrets backends and the metadata database the same way a task would."""

from __future__ import annotations

import psycopg

from retention.db.connection import Connection, configure
from retention.events.outbox import NotifyConfigError
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


SIGNING_SECRET_EXTRA = "signing_secret"


def http_sender(
    conn_id: str, timeout_seconds: float, not_headers: frozenset[str] = frozenset()
) -> HttpSender:
    """A sender over the provider's HttpHook session (host, scheme, auth, extra headers).

    The HttpHook turns a connection's extra fields into request headers; the
    signing secret is never one of them, and neither are ``not_headers`` (the
    extras this package reads itself, lower case).
    """
    from airflow.providers.http.hooks.http import HttpHook

    hook = HttpHook(http_conn_id=conn_id)
    session = hook.get_conn()
    for header in list(session.headers):
        if header.lower() in not_headers | {SIGNING_SECRET_EXTRA}:
            del session.headers[header]
    return HttpSender(session, hook.url_from_endpoint, timeout_seconds)


def signing_secret(conn_id: str) -> str:
    """The receiver's ``whsec_`` signing secret, from one documented place.

    The connection's extra ``signing_secret``, else its password when the
    connection has no login. A connection with a login and a ``whsec_``
    password is refused: the HttpHook would send that password to the receiver
    as Basic auth on every delivery.
    """
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    secret = (conn.extra_dejson or {}).get(SIGNING_SECRET_EXTRA)
    password = conn.password or ""
    if conn.login and password.startswith("whsec_"):
        raise NotifyConfigError(
            f"connection {conn_id!r}: the password is a whsec_ signing secret and the "
            "connection has a login, so it would be sent to the receiver as a Basic-auth "
            f"password; put the secret in the connection's extra {SIGNING_SECRET_EXTRA!r} "
            "(and keep login/password for the receiver's own auth), or remove the login"
        )
    if secret:
        return str(secret)
    if conn.login:
        raise NotifyConfigError(
            f"connection {conn_id!r}: no signing secret; set the extra "
            f"{SIGNING_SECRET_EXTRA!r} to the receiver's whsec_ secret"
        )
    return password


def api_base_url() -> str | None:
    """Airflow's public URL (``[api] base_url``; None when unset): links to runs in
    alerts, and the Retention view's own host behind a proxy."""
    from airflow.sdk.configuration import conf

    return conf.get("api", "base_url", fallback=None) or None
