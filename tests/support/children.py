"""A parent table with three levels of children, for the tests of ``children:``, and a
remote policy with a child table."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from retention.db.connection import Connection
from tests.support.policies import policy_fields, remote_fields
from tests.support.tables import create_table, media_with_renditions, new, old

PARENTS = 60  # keys 1..60; odd keys are old (eligible), even ones young


def create_family(db: Connection, name: str, per_parent: int = 2) -> None:
    """<name> → <name>_r (FK) → <name>_c (FK) → <name>_p (no constraint: references given),
    ``per_parent`` rows per parent at every level; a trigger logs the transaction of every
    deleted row of every table."""
    create_table(db, name, [(i, 1, old() if i % 2 else new()) for i in range(1, PARENTS + 1)])
    ident = sql.Identifier
    names = {
        "t": ident("public", name),
        "r": ident("public", f"{name}_r"),
        "c": ident("public", f"{name}_c"),
        "p": ident("public", f"{name}_p"),
        "r_fk": ident(f"{name}_r_fk"),
        "c_fk": ident(f"{name}_c_fk"),
        "log": ident("public", f"{name}_log"),
        "fn": ident("public", f"{name}_logfn"),
    }
    for statement in (
        "CREATE TABLE {r} (id bigserial PRIMARY KEY, asset_id bigint NOT NULL "
        "CONSTRAINT {r_fk} REFERENCES {t} (id))",
        "CREATE TABLE {c} (id bigserial PRIMARY KEY, rendition_id bigint NOT NULL "
        "CONSTRAINT {c_fk} REFERENCES {r} (id))",
        "CREATE TABLE {p} (id bigserial PRIMARY KEY, chunk_id bigint NOT NULL)",
        "CREATE INDEX ON {r} (asset_id)",
        "CREATE INDEX ON {c} (rendition_id)",
        "CREATE INDEX ON {p} (chunk_id)",
        "INSERT INTO {r} (asset_id) SELECT t.id FROM {t} AS t, generate_series(1, %(n)s)",
        "INSERT INTO {c} (rendition_id) SELECT r.id FROM {r} AS r, generate_series(1, %(n)s)",
        "INSERT INTO {p} (chunk_id) SELECT c.id FROM {c} AS c, generate_series(1, %(n)s)",
        "CREATE TABLE {log} (tbl text, xid bigint)",
        "CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO {log} VALUES (TG_TABLE_NAME, txid_current()); RETURN OLD; END $$",
    ):
        params = {"n": per_parent} if "%(n)s" in statement else None
        db.execute(sql.SQL(statement).format(**names), params)
    for table in (name, f"{name}_r", f"{name}_c", f"{name}_p"):
        db.execute(
            sql.SQL(
                "CREATE TRIGGER logged AFTER DELETE ON {} FOR EACH ROW EXECUTE FUNCTION {}()"
            ).format(ident("public", table), ident("public", f"{name}_logfn"))
        )


def family_children(name: str) -> list[dict]:
    return [
        {
            "table": f"{name}_r",
            "foreign_key": "asset_id",
            "children": [
                {
                    "table": f"{name}_c",
                    "foreign_key": "rendition_id",
                    "children": [
                        {"table": f"{name}_p", "foreign_key": "chunk_id", "references": "id"}
                    ],
                }
            ],
        }
    ]


def remote_family(db: Connection, name: str) -> dict[str, Any]:
    """A remote policy's fields (as a policies file holds them) over the media table
    public.<name> (two old objects, obj-1 and obj-2) whose rows each have three renditions
    in <name>_r, listed in ``children:``; it notifies, so each retention.deleted event
    records the rows deleted by table."""
    media_with_renditions(db, name, 2, per_row=3)
    return policy_fields(
        name,
        window_rows=10_000,
        batch_rows=500,
        window_per_tenant=False,
        remote=remote_fields(name),
        notify={"http_conn_id": "events_receiver", "endpoint": "/hooks/retention"},
        children=[{"table": f"{name}_r", "foreign_key": "asset_id"}],
    )
