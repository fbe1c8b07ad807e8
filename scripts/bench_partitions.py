"""`make bench-partitions`: the partition fast path against the row path on an unpartitioned copy.

Each of ``--repeat`` rounds seeds two tables with the same ``--rows`` rows
spread evenly over 12 months: one range-partitioned by month on
``created_at``, one plain (both with the recommended indexes, both analyzed).
The cutoff falls on the 7th month's lower bound, so 6 partitions are wholly
expired. On the partitioned table it runs the fast path
(``drop_expired_partitions``: detach CONCURRENTLY and drop) followed by the
normal plan and windows for whatever else is old; on the plain table, the plan
and the windows alone (``--workers`` windows at a time, windows sized by
time). The two alternate their order from round to round. It prints each
path's seconds and rows/s and their ratio (and the ``drop_partitions`` step's
own seconds), and checks that both tables end with no row older than the
cutoff. Figures go to ``.local/bench/bench_partitions-*.json`` with the git SHA.

``--column timestamp --zone Europe/Berlin`` makes ``created_at`` a wall-clock
``timestamp`` read in that zone (the rows and bounds are the same instants'
wall-clock times there): the fast path then also asks the server for the
zone's largest offset change and reads the index range near the cutoff of
the partition whose upper bound lies within that much of it (the DST rule).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import os
import time
from concurrent.futures import ThreadPoolExecutor

from benchlib import alternate, record, show
from psycopg import sql

from devtools.plans import request
from retention.db.connection import Connection, connect_dsn
from retention.db.migrate import migrate
from retention.policy import Policy, parse_policy
from retention.rows.deleter import delete_window
from retention.rows.partitions import drop_expired_partitions
from retention.rows.planner import plan_windows

START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
MONTHS = [dt.datetime(2025 + (m // 12), 1 + m % 12, 1, tzinfo=dt.UTC) for m in range(13)]
CUTOFF = MONTHS[6]
COLUMN_TYPES = {
    "timestamptz": "timestamp with time zone",
    "timestamp": "timestamp without time zone",
}


def bench_policy(table: str, zone: str) -> Policy:
    policy, problems = parse_policy(
        table,
        {
            "timestamp_timezone": zone,
            "schedule": None,
            "start_date": "2026-01-01",
            "retain_days": 30,
            "postgres_conn_id": "unused",
            "table": f"public.{table}",
            "key_column": "id",
            "timestamp_column": "created_at",
            "tenant_column": "tenant_id",
            "batch_rows": 5000,
            "lock_timeout_ms": 5000,
        },
    )
    if policy is None:
        raise SystemExit(f"bench policy invalid: {problems}")
    return policy


def seed(conn: Connection, table: str, rows: int, *, partitioned: bool, column: str) -> None:
    """Seed the table; a wall-clock ``column`` gets the instants' wall-clock times in the
    session's TimeZone (the caller sets the policy's zone)."""
    name = sql.Identifier("public", table)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(name))
    layout = sql.SQL(" PARTITION BY RANGE (created_at)") if partitioned else sql.SQL("")
    key = sql.SQL("PRIMARY KEY (id, created_at)" if partitioned else "PRIMARY KEY (id)")
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint NOT NULL, tenant_id integer NOT NULL, "
            "created_at {} NOT NULL, payload text NOT NULL, {}){}"
        ).format(name, sql.SQL(COLUMN_TYPES[column]), key, layout)
    )
    if partitioned:
        for low, high in itertools.pairwise(MONTHS):
            conn.execute(
                sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})").format(
                    sql.Identifier("public", f"{table}_{low:%Y%m}"),
                    name,
                    sql.Literal(low),
                    sql.Literal(high),
                )
            )
    span = (MONTHS[-1] - START).total_seconds()
    conn.execute(
        sql.SQL(
            "INSERT INTO {} SELECT g, g %% 20, %(start)s + (g - 1) * %(step)s, md5(g::text) "
            "FROM generate_series(1, %(rows)s) AS g"
        ).format(name),
        {"start": START, "step": dt.timedelta(seconds=span / rows), "rows": rows},
    )
    conn.execute(sql.SQL("CREATE INDEX ON {} (created_at)").format(name))
    conn.execute(sql.SQL("CREATE INDEX ON {} (tenant_id, id)").format(name))
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(name))


def windows_pass(dsn: str, policy: Policy, workers: int, run_id: str) -> int:
    with connect_dsn(dsn) as conn:
        windows = plan_windows(
            conn,
            request(policy, run_id, run_id, cutoff=CUTOFF, window_rows=None, min_windows=workers),
        )

    def work(window) -> int:  # one connection per worker, like a mapped task
        with connect_dsn(dsn) as conn:
            return delete_window(conn, policy, window, batch_rows=5000, dry_run=False).rows_deleted

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(work, windows))


def old_left(dsn: str, table: str, zone: str) -> int:
    with connect_dsn(dsn) as conn:
        conn.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
        row = conn.execute(
            sql.SQL("SELECT count(*) AS n FROM {} WHERE created_at < %s").format(
                sql.Identifier("public", table)
            ),
            (CUTOFF,),
        ).fetchone()
    return int(row["n"]) if row else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="rounds, alternating the order")
    parser.add_argument("--column", choices=sorted(COLUMN_TYPES), default="timestamptz")
    parser.add_argument("--zone", default="UTC", help="timestamp_timezone of the policy")
    args = parser.parse_args()
    dsn = os.environ["RETENTION_DEMO_DSN"]
    print(
        f"rows={args.rows:,} partitions=12 (6 expired) workers={args.workers} "
        f"repeat={args.repeat} column={args.column} zone={args.zone}"
    )
    with connect_dsn(dsn) as conn:
        migrate(conn)

    def seeded(table: str, *, partitioned: bool) -> None:
        with connect_dsn(dsn) as conn:
            conn.execute("SELECT set_config('TimeZone', %s, false)", (args.zone,))
            seed(conn, table, args.rows, partitioned=partitioned, column=args.column)
            conn.execute("CHECKPOINT")

    def fast() -> dict[str, float]:
        seeded("bench_parted", partitioned=True)
        policy = bench_policy("bench_parted", args.zone)
        run_id = f"bench-{time.time_ns()}"
        began = time.perf_counter()
        with connect_dsn(dsn) as conn:
            dropped = drop_expired_partitions(
                conn,
                policy,
                run_id,
                CUTOFF,
                column_type=COLUMN_TYPES[args.column],
                dry_run=False,
            )
        step_seconds = time.perf_counter() - began
        rows_by_rows = windows_pass(dsn, policy, args.workers, run_id)
        seconds = time.perf_counter() - began
        if old_left(dsn, "bench_parted", args.zone):
            raise SystemExit("partitioned table still holds old rows")
        if dropped["left_to_rows"] or dropped.get("not_dropped"):
            raise SystemExit(f"expected every expired partition to go: {dropped}")
        return {
            "seconds": seconds,
            "drop_partitions_seconds": step_seconds,
            "partitions": len(dropped["dropped"]),
            "rows": dropped.get("estimated_rows_known", dropped["estimated_rows"]) + rows_by_rows,
        }

    def rows_path() -> dict[str, float]:
        seeded("bench_plain_rows", partitioned=False)
        policy = bench_policy("bench_plain_rows", args.zone)
        began = time.perf_counter()
        deleted = windows_pass(dsn, policy, args.workers, f"bench-{time.time_ns()}")
        seconds = time.perf_counter() - began
        if old_left(dsn, "bench_plain_rows", args.zone):
            raise SystemExit("plain table still holds old rows")
        return {"seconds": seconds, "rows": deleted}

    fast_runs, row_runs = alternate(args.repeat, fast, rows_path)
    with connect_dsn(dsn) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_parted, bench_plain_rows CASCADE")
    print(f"\nexpired partitions per round: {[int(r['partitions']) for r in fast_runs]}")
    print(show("partition path seconds", [r["seconds"] for r in fast_runs]))
    print(show("  of which drop_partitions", [r["drop_partitions_seconds"] for r in fast_runs]))
    print(show("row path seconds", [r["seconds"] for r in row_runs]))
    print(show("row path rows/s", [r["rows"] / r["seconds"] for r in row_runs], digits=0))
    ratios = [r["seconds"] / f["seconds"] for f, r in zip(fast_runs, row_runs, strict=True)]
    print(show("row path time ÷ partition path time", ratios, digits=1))
    record(
        "bench_partitions",
        vars(args),
        {"partition_path": fast_runs, "row_path": row_runs, "speedup": ratios},
    )


if __name__ == "__main__":
    main()
