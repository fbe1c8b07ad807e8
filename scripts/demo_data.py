"""`make demo-data`: reseed both demo tables, so the demo policies have rows to delete again.

After ``make demo`` (or a day of ``make airflow``) nothing older than the
cutoffs is left. This recreates ``public.event_logs`` (``--rows``, default
1,000,000, over 90 days up to now, 20 tenants) and ``public.media_assets``
(``--media-rows``, default 400, over 28 days, 5 tenants; the objects
``asset-0000001`` … oldest first), and forgets the media ledger's earlier
operations: the reseeded rows carry the same keys and versions, which to the
ledger would look like rows restored after their deletion. Run it with no run
of the demo DAGs in progress, e.g. ``make demo-data ARGS="--rows 50000"``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT)]

from devtools.seed import renditions_table_for, seed_event_logs, seed_media_assets  # noqa: E402
from retention.db.connection import Connection, connect_dsn  # noqa: E402
from retention.db.migrate import migrate  # noqa: E402
from retention.paths import load_local_env  # noqa: E402

EVENT_DAYS, EVENT_TENANTS = 90, 20
MEDIA_DAYS, MEDIA_TENANTS = 28, 5


def forget_media_operations(conn: Connection, policy: str = "media_assets") -> None:
    """Delete the media policy's operations, attempts and outbox events."""
    migrate(conn)
    for table in ("attempts", "outbox"):
        conn.execute(
            sql.SQL(
                "DELETE FROM retention.{} WHERE operation_key IN "
                "(SELECT operation_key FROM retention.operations WHERE policy = %s)"
            ).format(sql.Identifier(table)),
            (policy,),
        )
    conn.execute("DELETE FROM retention.operations WHERE policy = %s", (policy,))


def reseed(
    conn: Connection,
    *,
    rows: int,
    media_rows: int,
    end: dt.datetime,
    event_table: str = "public.event_logs",
    media_table: str = "public.media_assets",
    media_policy: str = "media_assets",
) -> str:
    """Recreate both tables with rows up to ``end``; returns what was seeded, in words."""
    began = time.perf_counter()
    seed_event_logs(
        conn, table=event_table, rows=rows, end=end, days=EVENT_DAYS, tenants=EVENT_TENANTS
    )
    seed_media_assets(
        conn, table=media_table, rows=media_rows, end=end, days=MEDIA_DAYS, tenants=MEDIA_TENANTS
    )
    forget_media_operations(conn, media_policy)
    return (
        f"seeded {event_table} ({rows:,} rows, {EVENT_DAYS} days, {EVENT_TENANTS} tenants) "
        f"and {media_table} ({media_rows:,} rows, {MEDIA_DAYS} days, 2 renditions each in "
        f"{renditions_table_for(media_table)}) "
        f"in {time.perf_counter() - began:.1f}s; earlier {media_policy} operations forgotten"
    )


def positive(text: str) -> int:
    number = int(text.replace("_", "").replace(",", ""))
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=positive, default=1_000_000, help="event_logs rows")
    parser.add_argument("--media-rows", type=positive, default=400, help="media_assets rows")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = arguments().parse_args(argv)
    load_local_env()
    end = dt.datetime.now(dt.UTC).replace(microsecond=0)
    with connect_dsn(os.environ["RETENTION_DEMO_DSN"]) as conn:
        print(reseed(conn, rows=args.rows, media_rows=args.media_rows, end=end))
    print(
        "the demo DAGs delete what is older than their cutoffs on their next run: trigger "
        "retention__event_logs and retention__media_assets in the UI (`make airflow`), "
        "or run `make demo`"
    )


if __name__ == "__main__":
    main()
