"""Helpers that build small, exactly known tables in the real test database."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from psycopg import sql

from retention.db import Connection
from retention.planner import PlanRequest
from retention.policy import Policy

CUTOFF = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def create_table(
    db: Connection, name: str, rows: Iterable[tuple[int, int | None, dt.datetime]]
) -> None:
    """public.<name>(id, tenant_id, created_at, payload) with the recommended indexes."""
    table = sql.Identifier("public", name)
    db.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, tenant_id integer, "
            "created_at timestamptz NOT NULL, payload text NOT NULL DEFAULT 'x')"
        ).format(table)
    )
    with db.cursor() as cur:
        cur.executemany(
            sql.SQL("INSERT INTO {} (id, tenant_id, created_at) VALUES (%s, %s, %s)").format(table),
            list(rows),
        )
    db.execute(sql.SQL("CREATE INDEX ON {} (tenant_id, id)").format(table))
    db.execute(sql.SQL("CREATE INDEX ON {} (created_at)").format(table))


def ids_left(db: Connection, name: str) -> list[int]:
    rows = db.execute(
        sql.SQL("SELECT id FROM {} ORDER BY id").format(sql.Identifier("public", name))
    )
    return [r["id"] for r in rows]


def request(
    policy: Policy, run_id: str = "run-1", plan_id: str | None = None, **kw: object
) -> PlanRequest:
    values: dict[str, object] = {
        "policy": policy,
        "run_id": run_id,
        "plan_id": plan_id or f"{run_id}@a",
        "cutoff": CUTOFF,
        "anchor_source": "logical_date",
        "logical_date": CUTOFF + dt.timedelta(days=policy.retain_days),
        "window_rows": policy.window_rows,
        "batch_rows": policy.batch_rows,
        "max_windows": 1024,
        "dry_run": False,
    }
    values.update(kw)
    return PlanRequest(**values)  # type: ignore[arg-type]


def old(seconds: int = 0) -> dt.datetime:
    """A timestamp before the cutoff (eligible)."""
    return CUTOFF - dt.timedelta(days=1, seconds=seconds)


def new(seconds: int = 0) -> dt.datetime:
    """A timestamp after the cutoff (kept)."""
    return CUTOFF + dt.timedelta(days=1, seconds=seconds)
