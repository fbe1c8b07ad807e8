"""Seed tables shaped like a real event log, for the demo, the tests and the benchmarks.

``seed_event_logs`` builds ``rows`` rows spread evenly over ``days`` days that end
just before ``end``, with tenants assigned round-robin (so every tenant's ids
interleave across the whole key range), then adds the indexes docs/policies.md
recommends: the primary key, the timestamp, and (tenant, key).
"""

from __future__ import annotations

import datetime as dt

from psycopg import sql

from retention.db.connection import Connection


def create_event_logs(conn: Connection, table: str, *, tenant_column: bool = True) -> None:
    """(Re)create an empty event-log table without secondary indexes."""
    schema, name = table.split(".") if "." in table else ("public", table)
    ident = sql.Identifier(schema, name)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
    tenant = sql.SQL("tenant_id integer,") if tenant_column else sql.SQL("")
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, {} created_at timestamptz NOT NULL, "
            "payload text NOT NULL)"
        ).format(ident, tenant)
    )


def add_indexes(conn: Connection, table: str, *, tenant_column: bool = True) -> None:
    schema, name = table.split(".") if "." in table else ("public", table)
    ident = sql.Identifier(schema, name)
    conn.execute(sql.SQL("CREATE INDEX ON {} (created_at)").format(ident))
    if tenant_column:
        conn.execute(sql.SQL("CREATE INDEX ON {} (tenant_id, id)").format(ident))
    conn.execute(sql.SQL("ANALYZE {}").format(ident))


def seed_event_logs(
    conn: Connection,
    *,
    table: str = "public.event_logs",
    rows: int,
    end: dt.datetime,
    days: int = 90,
    tenants: int = 20,
) -> None:
    """Create ``table`` with ``rows`` rows over the ``days`` days before ``end``."""
    create_event_logs(conn, table, tenant_column=tenants > 0)
    schema, name = table.split(".") if "." in table else ("public", table)
    ident = sql.Identifier(schema, name)
    tenant_expr = sql.SQL("(g %% %(tenants)s) + 1,") if tenants > 0 else sql.SQL("")
    tenant_col = sql.SQL("tenant_id,") if tenants > 0 else sql.SQL("")
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (id, {} created_at, payload) "
            "SELECT g, {} %(end)s - (%(rows)s - g + 1) * (%(span)s / %(rows)s), "
            "md5(g::text) FROM generate_series(1, %(rows)s) AS g"
        ).format(ident, tenant_col, tenant_expr),
        {"rows": rows, "end": end, "span": dt.timedelta(days=days), "tenants": tenants},
    )
    add_indexes(conn, table, tenant_column=tenants > 0)


def renditions_table_for(table: str) -> str:
    """The child table of a media table: ``public.media_assets`` → ``public.media_renditions``."""
    schema, name = table.split(".") if "." in table else ("public", table)
    return f"{schema}.{name.removesuffix('_assets')}_renditions"


def seed_media_assets(
    conn: Connection,
    *,
    table: str = "public.media_assets",
    rows: int,
    end: dt.datetime,
    days: int = 28,
    tenants: int = 5,
    renditions: int = 2,
) -> None:
    """Rows naming objects in the media API: ``object_key`` and a ``version``; and
    ``renditions`` rows per asset in its child table (:func:`renditions_table_for`, a
    foreign key to the asset without ON DELETE action), which a policy lists in
    ``children:`` so that they go with their asset (0: no child table)."""
    schema, name = table.split(".") if "." in table else ("public", table)
    ident = sql.Identifier(schema, name)
    child = sql.Identifier(*renditions_table_for(table).split("."))
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(child))
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, tenant_id integer NOT NULL, "
            "created_at timestamptz NOT NULL, object_key text NOT NULL, "
            "version integer NOT NULL DEFAULT 1)"
        ).format(ident)
    )
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (id, tenant_id, created_at, object_key) "
            "SELECT g, (g %% %(tenants)s) + 1, "
            "%(end)s - (%(rows)s - g + 1) * (%(span)s / %(rows)s), "
            "'asset-' || lpad(g::text, 7, '0') FROM generate_series(1, %(rows)s) AS g"
        ).format(ident),
        {"rows": rows, "end": end, "span": dt.timedelta(days=days), "tenants": tenants},
    )
    conn.execute(sql.SQL("CREATE INDEX ON {} (created_at)").format(ident))
    if renditions:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id bigserial PRIMARY KEY, "
                "asset_id bigint NOT NULL REFERENCES {} (id), size text NOT NULL)"
            ).format(child, ident)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (asset_id, size) SELECT a.id, 'w' || (r * 320) "
                "FROM {} AS a, generate_series(1, %(per)s) AS r ORDER BY a.id, r"
            ).format(child, ident),
            {"per": renditions},
        )
        conn.execute(sql.SQL("CREATE INDEX ON {} (asset_id)").format(child))
        conn.execute(sql.SQL("ANALYZE {}").format(child))
    conn.execute(sql.SQL("ANALYZE {}").format(ident))
