"""Fixtures' helpers for remote-deletion tests: a media table, a sandbox, a policy."""

from __future__ import annotations

import datetime as dt
from typing import Any

from conftest import make_policy
from dbhelpers import CUTOFF
from psycopg import sql

from retention.db import Connection
from retention.planner import plan_windows
from retention.policy import Policy
from retention.windows import Window

HTTP_CONN_ID = "sandbox_api"


def create_media_table(
    db: Connection, name: str, rows: int, *, tenants: int = 3, new_rows: int = 0
) -> None:
    """public.<name>(id, tenant_id, created_at, object_key, version).

    ``rows`` rows are older than the cutoff, ``new_rows`` newer.
    """
    table = sql.Identifier("public", name)
    db.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, tenant_id integer NOT NULL, "
            "created_at timestamptz NOT NULL, object_key text NOT NULL, version integer NOT NULL)"
        ).format(table)
    )
    db.execute(
        sql.SQL(
            "INSERT INTO {} SELECT g, 1 + g %% %(tenants)s, "
            "CASE WHEN g <= %(rows)s THEN %(old)s ELSE %(new)s END, 'obj-' || g, 1 "
            "FROM generate_series(1, %(total)s) AS g"
        ).format(table),
        {
            "tenants": tenants,
            "rows": rows,
            "total": rows + new_rows,
            "old": CUTOFF - dt.timedelta(days=2),
            "new": CUTOFF + dt.timedelta(days=2),
        },
    )
    db.execute(sql.SQL("CREATE INDEX ON {} (tenant_id, id)").format(table))


def remote_policy(name: str, **remote: Any) -> Policy:
    spec: dict[str, Any] = {
        "http_conn_id": HTTP_CONN_ID,
        "endpoint": "/v1/assets/{object_id}",
        "object_id_column": "object_key",
        "version_column": "version",
        "rate_per_second": 500,
        "burst": 50,
        "limiter_scope": name,
        "pool": "default_pool",
        "max_attempts": 4,
        "request_timeout_seconds": 2,
        "backoff_base_seconds": 0.05,
        "backoff_max_seconds": 0.2,
    }
    spec.update(remote)
    return make_policy(
        name, window_rows=10_000, batch_rows=500, remote=spec, window_per_tenant=False
    )


def plan(db: Connection, policy: Policy) -> list[Window]:
    from dbhelpers import request

    return plan_windows(db, request(policy))


def count(db: Connection, query: str, *params: Any) -> int:
    row = db.execute(query, params).fetchone()
    assert row is not None
    return int(next(iter(row.values())))
