"""Small, exactly known tables in the real test database, and plan requests over them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from psycopg import sql

from devtools.plans import CUTOFF, request
from retention.db.connection import Connection
from retention.policy import Policy
from retention.rows.planner import plan_windows
from retention.rows.windows import Window

TIMESTAMP_TYPES = {
    "timestamptz": sql.SQL("timestamptz"),
    "timestamp": sql.SQL("timestamp without time zone"),  # naive: UTC wall time stored
}


def create_table(
    db: Connection,
    name: str,
    rows: Iterable[tuple[int, int | None, dt.datetime]],
    *,
    timestamp_type: str = "timestamptz",
) -> None:
    """public.<name>(id, tenant_id, created_at, payload) with the recommended indexes, analyzed.

    With ``timestamp_type="timestamp"`` the column has no time zone and holds each
    timestamp's UTC wall time.
    """
    table = sql.Identifier("public", name)
    db.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, tenant_id integer, "
            "created_at {} NOT NULL, payload text NOT NULL DEFAULT 'x')"
        ).format(table, TIMESTAMP_TYPES[timestamp_type])
    )
    naive = timestamp_type == "timestamp"
    values = [
        (key, tenant, ts.astimezone(dt.UTC).replace(tzinfo=None) if naive else ts)
        for key, tenant, ts in rows
    ]
    with db.cursor() as cur:
        cur.executemany(
            sql.SQL("INSERT INTO {} (id, tenant_id, created_at) VALUES (%s, %s, %s)").format(table),
            values,
        )
    db.execute(sql.SQL("CREATE INDEX ON {} (tenant_id, id)").format(table))
    db.execute(sql.SQL("CREATE INDEX ON {} (created_at)").format(table))
    db.execute(sql.SQL("ANALYZE {}").format(table))  # as autovacuum would: the planner estimates


def ids_left(db: Connection, name: str) -> list[int]:
    rows = db.execute(
        sql.SQL("SELECT id FROM {} ORDER BY id").format(sql.Identifier("public", name))
    )
    return [r["id"] for r in rows]


def old(seconds: int = 0) -> dt.datetime:
    """A timestamp before the cutoff (eligible)."""
    return CUTOFF - dt.timedelta(days=1, seconds=seconds)


def new(seconds: int = 0) -> dt.datetime:
    """A timestamp after the cutoff (kept)."""
    return CUTOFF + dt.timedelta(days=1, seconds=seconds)


def create_media_table(
    db: Connection,
    name: str,
    rows: int,
    *,
    tenants: int = 3,
    new_rows: int = 0,
    cutoff: dt.datetime = CUTOFF,
    old_age: dt.timedelta = dt.timedelta(days=2),
    first_id: int = 1,
) -> None:
    """public.<name>(id, tenant_id, created_at, object_key, version), created afresh.

    ``rows`` rows are ``old_age`` older than ``cutoff``, ``new_rows`` two days
    younger; ids (and object keys ``obj-<id>``) start at ``first_id``.
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
            "CASE WHEN g < %(first)s + %(rows)s THEN %(old)s ELSE %(new)s END, 'obj-' || g, 1 "
            "FROM generate_series(%(first)s, %(first)s + %(total)s - 1) AS g"
        ).format(table),
        {
            "tenants": tenants,
            "rows": rows,
            "first": first_id,
            "total": rows + new_rows,
            "old": cutoff - old_age,
            "new": cutoff + dt.timedelta(days=2),
        },
    )
    db.execute(sql.SQL("CREATE INDEX ON {} (tenant_id, id)").format(table))
    db.execute(sql.SQL("CREATE INDEX ON {} (created_at)").format(table))
    db.execute(sql.SQL("ANALYZE {}").format(table))


def media_with_renditions(
    db: Connection, name: str, objects: int, *, per_row: int = 2, tenants: int = 3
) -> str:
    """The media table with ``objects`` rows, and a child table ``<name>_r`` (its name
    returned) with ``per_row`` renditions per row, referencing it by a foreign key."""
    create_media_table(db, name, objects, tenants=tenants)
    renditions = f"{name}_r"
    db.execute(
        f"CREATE TABLE public.{renditions} (id bigserial PRIMARY KEY, "
        f"asset_id bigint NOT NULL REFERENCES public.{name} (id))"
    )
    db.execute(
        f"INSERT INTO public.{renditions} (asset_id) "  # noqa: S608
        f"SELECT t.id FROM public.{name} AS t, generate_series(1, %s)",
        (per_row,),
    )
    return renditions


def plan(db: Connection, policy: Policy, **kw: Any) -> list[Window]:
    return plan_windows(db, request(policy, **kw))


def count(db: Connection, query: str, *params: Any) -> int:
    row = db.execute(query, params).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(next(iter(row.values())))


def boundary_rows(cutoff: dt.datetime) -> list[tuple[int, int | None, dt.datetime]]:
    """Rows at the cutoff and a microsecond either side, between eligible keys."""
    micro = dt.timedelta(microseconds=1)
    return [
        (1, 1, cutoff - dt.timedelta(days=3)),
        (2, 1, cutoff - micro),  # eligible
        (3, 1, cutoff),  # kept: exactly at the cutoff is not older than it
        (4, 1, cutoff + micro),  # kept
        (5, 1, cutoff - dt.timedelta(days=1)),
        (6, 1, cutoff),  # kept
        (7, 1, cutoff - micro),  # eligible
        (8, 1, cutoff + dt.timedelta(days=1)),
    ]


BOUNDARY_KEPT = [3, 4, 6, 8]
