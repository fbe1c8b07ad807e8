"""`make bench-rows`: the window deleter against one plain DELETE on an identical table.

For each window layout (key-range windows across tenants, and one group of
windows per tenant) and each of ``--repeat`` rounds, it seeds two identical
2M-row event logs (20 tenants, round-robin, 60 days), deletes the older 1M rows
of one through the project's planner and window deleter (``--workers`` windows
at a time, as pool slots would allow; windows sized by time unless
``--window-rows`` is given, batches aimed at the policy's ``target_batch_ms``)
and of the other with a single ``DELETE ... WHERE created_at < cutoff``. The
two deletions alternate their order from round to round. It prints rows/s of
both, their ratio (deleter alone, and with planning included), and the
longest transaction.

``--children N`` gives each table a child table with N rows per parent row (a foreign
key without ON DELETE action, indexed). The deleter's policy lists it in ``children:``
(each batch deletes the children of its rows first, in the same transaction); the
plain way is one transaction: ``DELETE`` the children whose parent is older than the
cutoff, then the parents. Rates count the parent rows (both ways delete the same rows
of both tables); target: at least 0.8 of the plain way's rate, no transaction over
250 ms.

``--with-hold`` adds a third identical table, deleted by the same deleter under a second
policy that has an active legal hold on a key no row has: nothing is kept, but every
batch's delete carries the held-row predicate (``include/sql/hold_row_held.sql``), as
every batch did before the deleter learnt to leave it out when no hold can apply. The
three deletions rotate their order from round to round; it prints that rate, its ratio
to the single DELETE, and the deleter's rate without a hold ÷ with one, measured in the
same round on the same machine load.

"Longest transaction" is, for the deleter, the longest single batch as its
client saw it: from BEGIN (with its SET LOCAL timeouts) through the key probe,
the DELETE and the window-ledger update, to the return of COMMIT. For the
single DELETE it is that one transaction, BEGIN to COMMIT. Figures go to
``.local/bench/bench_rows-*.json`` with the git SHA.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import time

from benchlib import count_older, record, run_windows, seed_identical_tables, show, spread
from psycopg import sql

from retention.db.connection import connect_dsn
from retention.holds.store import lift_hold, place_hold
from retention.policy import Policy, parse_policy

END = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CUTOFF = END - dt.timedelta(days=30)
HELD_POLICY = "bench_rows_held"  # --with-hold: its table's deleter runs under a hold


def bench_policy(
    args: argparse.Namespace,
    per_tenant: bool,
    name: str = "bench_rows",
    table: str = "bench_windowed",
) -> Policy:
    policy, problems = parse_policy(
        name,
        {
            "schedule": None,
            "start_date": "2026-01-01",
            "retain_days": 30,
            "postgres_conn_id": "unused",
            "table": f"public.{table}",
            "key_column": "id",
            "timestamp_column": "created_at",
            "tenant_column": "tenant_id",
            "window_per_tenant": per_tenant,
            "window_rows": args.window_rows,
            "batch_rows": args.batch_rows,
            "children": [{"table": child_of(table), "foreign_key": "parent_id"}]
            if args.children
            else [],
        },
    )
    if policy is None:
        raise SystemExit(f"bench policy invalid: {problems}")
    return policy


def child_of(table: str) -> str:
    return f"{table}_children"


def bench_tables(args: argparse.Namespace) -> tuple[str, ...]:
    """The identical tables a round seeds: the deleter's, the single DELETE's, and with
    ``--with-hold`` the one its deleter empties under a hold."""
    return ("bench_windowed", "bench_plain") + (("bench_held",) if args.with_hold else ())


def seed_pair(dsn: str, rows: int, children: int, tables: tuple[str, ...]) -> int:
    for table in tables:  # a child table blocks the parent's DROP
        with connect_dsn(dsn) as conn:
            conn.execute(
                sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier("public", child_of(table)))
            )
    seed_identical_tables(dsn, tables, rows=rows, end=END, days=60)
    with connect_dsn(dsn) as conn:
        for table in tables if children else ():
            names = {
                "child": sql.Identifier("public", child_of(table)),
                "parent": sql.Identifier("public", table),
            }
            for statement in (
                "CREATE TABLE {child} (id bigserial PRIMARY KEY, parent_id bigint NOT NULL "
                "REFERENCES {parent} (id), payload text NOT NULL)",
                "INSERT INTO {child} (parent_id, payload) SELECT p.id, md5(p.id::text || r) "
                "FROM {parent} AS p, generate_series(1, %(per)s) AS r ORDER BY p.id, r",
                "CREATE INDEX ON {child} (parent_id)",
                "VACUUM ANALYZE {child}",
            ):
                params = {"per": children} if "%(per)s" in statement else None
                conn.execute(sql.SQL(statement).format(**names), params)
        eligible = count_older(conn, "bench_plain", CUTOFF)
        conn.execute("CHECKPOINT")
    return eligible


def run_plain(dsn: str, children: int) -> tuple[int, float]:
    """The plain way: one transaction, the old parents' children first, then the parents."""
    with connect_dsn(dsn) as conn:
        began = time.perf_counter()
        with conn.transaction():
            if children:
                conn.execute(
                    "DELETE FROM bench_plain_children WHERE parent_id IN "
                    "(SELECT id FROM bench_plain WHERE created_at < %s)",
                    (CUTOFF,),
                )
            deleted = conn.execute(
                "DELETE FROM bench_plain WHERE created_at < %s", (CUTOFF,)
            ).rowcount
        return deleted, time.perf_counter() - began


def measure(dsn: str, args: argparse.Namespace, per_tenant: bool) -> dict[str, float]:
    """One round of one layout: the deletions on freshly seeded identical tables."""
    tables = bench_tables(args)
    eligible = seed_pair(dsn, args.rows, args.children, tables)
    policy = bench_policy(args, per_tenant)
    outcome: dict[str, float] = {}

    def deleter_run(policy: Policy, prefix: str = "") -> None:
        run = run_windows(
            dsn,
            policy,
            cutoff=CUTOFF,
            logical_date=END,
            window_rows=args.window_rows,
            batch_rows=args.batch_rows,
            workers=args.workers,
        )
        results = run.results
        figures = {
            "deleted": sum(r.rows_deleted for r in results),
            "plan_s": run.plan_seconds,
            "delete_s": run.delete_seconds,
            "windows": len(run.windows),
            "transactions": sum(r.batches for r in results),
            "hold_checked": sum(r.hold_checked_batches for r in results),
            "longest_ms": max(r.longest_batch_ms for r in results),
            "paced_s": sum(float(r.pause.get("paced_seconds", 0.0)) for r in results),
        }
        outcome.update({f"{prefix}{name}": value for name, value in figures.items()})

    def windowed() -> None:
        deleter_run(policy)

    def held() -> None:
        """The same deleter under an active hold that keeps nothing (a key no row has)."""
        with connect_dsn(dsn) as conn:
            hold = place_hold(
                conn,
                policy=HELD_POLICY,
                match="key",
                value="0",
                reason="bench_rows --with-hold: every batch carries the held-row predicate",
                placed_by="bench_rows",
            )
        try:
            deleter_run(bench_policy(args, per_tenant, HELD_POLICY, "bench_held"), "held_")
        finally:
            with connect_dsn(dsn) as conn:
                lift_hold(conn, hold.hold_id, reason="bench round done", lifted_by="bench_rows")

    def plain() -> None:
        outcome["plain_deleted"], outcome["plain_s"] = run_plain(dsn, args.children)

    steps = [windowed, plain, held] if args.with_hold else [windowed, plain]
    turn = args.round % len(steps)  # each deletion goes first in turn
    for step in steps[turn:] + steps[:turn]:
        step()
    with connect_dsn(dsn) as conn:
        left = conn.execute(
            "SELECT count(*) AS n FROM bench_windowed WHERE created_at < %s", (CUTOFF,)
        ).fetchone()
        held_left = (
            conn.execute(
                "SELECT count(*) AS n FROM bench_held WHERE created_at < %s", (CUTOFF,)
            ).fetchone()
            if args.with_hold
            else None
        )
        children_left = [
            conn.execute(
                sql.SQL("SELECT count(*) AS n FROM {}").format(
                    sql.Identifier("public", child_of(table))
                )
            ).fetchone()["n"]
            for table in (tables if args.children else ())
        ]
        for table in tables:
            if args.children:
                conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(child_of(table))))
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    if not (outcome["deleted"] == outcome["plain_deleted"] == eligible) or (left and left["n"]):
        raise SystemExit(f"mismatch: {outcome}, {eligible=}")
    if args.with_hold and (outcome["held_deleted"] != eligible or (held_left and held_left["n"])):
        raise SystemExit(f"mismatch under the hold: {outcome}, {eligible=}")
    if len(set(children_left)) > 1:
        raise SystemExit(f"children left differ (deleter, plain): {children_left}")
    plain_rate = outcome["plain_deleted"] / outcome["plain_s"]
    rate = outcome["deleted"] / outcome["delete_s"]
    total = outcome["deleted"] / (outcome["plan_s"] + outcome["delete_s"])
    with_hold: dict[str, float] = {}
    if args.with_hold:
        held_rate = outcome["held_deleted"] / outcome["held_delete_s"]
        with_hold = {
            "held_rate": held_rate,
            "held_ratio": held_rate / plain_rate,
            "held_ratio_with_planning": outcome["held_deleted"]
            / (outcome["held_plan_s"] + outcome["held_delete_s"])
            / plain_rate,
            "without_hold_over_with": rate / held_rate,
        }
    return {
        **outcome,
        **with_hold,
        "eligible": eligible,
        "rate": rate,
        "plain_rate": plain_rate,
        "ratio": rate / plain_rate,
        "ratio_with_planning": total / plain_rate,
        "plain_ms": outcome["plain_s"] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument(
        "--workers", type=int, default=2, help="windows at a time (retention_db pool: 2 slots)"
    )
    parser.add_argument(
        "--window-rows",
        type=int,
        default=None,
        help="rows per window (default: sized by target_window_seconds, as in production)",
    )
    parser.add_argument("--batch-rows", type=int, default=5_000, help="first batch of a window")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, alternating the order")
    parser.add_argument(
        "--children",
        type=int,
        default=0,
        help="rows per parent in a child table listed in children: (0: no child table)",
    )
    parser.add_argument(
        "--with-hold",
        action="store_true",
        help="also delete a third identical table with an active hold of its policy (on a "
        "key no row has), so every batch carries the held-row predicate",
    )
    parser.add_argument(
        "--layout",
        choices=("both", "key-range", "per-tenant"),
        default="both",
        help="which window layout(s) to measure",
    )
    args = parser.parse_args()
    dsn = os.environ["RETENTION_DEMO_DSN"]
    print(
        f"rows={args.rows:,} window_rows={args.window_rows or 'sized by time'} "
        f"batch_rows={args.batch_rows:,} "
        f"workers={args.workers} repeat={args.repeat} children={args.children} per parent"
        f"{' with-hold' if args.with_hold else ''}"
    )
    figures: dict[str, object] = {}
    layouts = {"both": (False, True), "key-range": (False,), "per-tenant": (True,)}
    for per_tenant in layouts[args.layout]:
        layout = "one window group per tenant" if per_tenant else "key-range windows"
        rounds = []
        for number in range(args.repeat):
            args.round = number
            rounds.append(measure(dsn, args, per_tenant))
        first = rounds[0]
        print(f"\n== window_per_tenant={str(per_tenant).lower()} ({layout})")
        print(
            f"eligible rows:        {first['eligible']:,.0f}; windows per round "
            f"{[int(r['windows']) for r in rounds]}, transactions per round "
            f"{[int(r['transactions']) for r in rounds]}, of which with the held-row "
            f"predicate {[int(r['hold_checked']) for r in rounds]} (the deletions take turns "
            "going first, the deleter in round 1)"
        )
        print(show("window deleter rows/s", [r["rate"] for r in rounds], digits=0))
        print(show("single DELETE rows/s", [r["plain_rate"] for r in rounds], digits=0))
        print(show("planning seconds", [r["plan_s"] for r in rounds]))
        print(show("ratio deleter/single", [r["ratio"] for r in rounds]))
        print(show("ratio with planning", [r["ratio_with_planning"] for r in rounds]))
        print(show("longest deleter transaction", [r["longest_ms"] for r in rounds], " ms", 0))
        print(show("single DELETE transaction", [r["plain_ms"] for r in rounds], " ms", 0))
        print(show("deleter paced (health pacing)", [r["paced_s"] for r in rounds], " s"))
        if args.with_hold:
            print(
                "under a hold: transactions per round "
                f"{[int(r['held_transactions']) for r in rounds]}, of which with the held-row "
                f"predicate {[int(r['held_hold_checked']) for r in rounds]}"
            )
            print(show("deleter under a hold rows/s", [r["held_rate"] for r in rounds], digits=0))
            print(show("ratio under a hold/single", [r["held_ratio"] for r in rounds]))
            print(
                show(
                    "ratio under a hold with planning",
                    [r["held_ratio_with_planning"] for r in rounds],
                )
            )
            print(
                show(
                    "deleter: no hold / under a hold", [r["without_hold_over_with"] for r in rounds]
                )
            )
        print(
            "targets (default layout): "
            + (
                f"ratio deleter/single >= 0.8 against DELETE children then parents "
                f"({args.children} children per row)"
                if args.children
                else "ratio with planning >= 0.9"
            )
            + "; no transaction over 250 ms"
        )
        figures[layout] = {
            "rounds": rounds,
            "ratio": spread([r["ratio"] for r in rounds]),
            "ratio_with_planning": spread([r["ratio_with_planning"] for r in rounds]),
            "longest_transaction_ms": spread([r["longest_ms"] for r in rounds]),
            **(
                {
                    "held_ratio_with_planning": spread(
                        [r["held_ratio_with_planning"] for r in rounds]
                    ),
                    "without_hold_over_with": spread([r["without_hold_over_with"] for r in rounds]),
                }
                if args.with_hold
                else {}
            ),
        }
    record("bench_rows", vars(args), figures)


if __name__ == "__main__":
    main()
