"""What every benchmark script shares: repeats in alternating order, min and median,
a JSON record of the figures with the git SHA under ``.local/bench/``, and the
window deleter run as mapped tasks run it."""

from __future__ import annotations

import datetime as dt
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the package is imported where it is used: make mutation runs without it
    from retention.policy import Policy
    from retention.rows.lifecycle import WindowResult
    from retention.rows.windows import Window

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / ".local" / "bench"


def git_sha() -> str:
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{sha}{'+uncommitted' if dirty else ''}" or "unknown"


def alternate(
    repeat: int, first: Callable[[], Any], second: Callable[[], Any]
) -> tuple[list[Any], list[Any]]:
    """Run two compared measurements ``repeat`` times, swapping their order each time."""
    a, b = rotate(repeat, first, second)
    return a, b


def rotate(repeat: int, *runs: Callable[[], Any]) -> tuple[list[Any], ...]:
    """Run compared measurements ``repeat`` times, each round starting one later, so that
    none always runs first (on a cold cache) or last; their results, in ``runs``' order."""
    results: tuple[list[Any], ...] = tuple([] for _ in runs)
    for index in range(repeat):
        for offset in range(len(runs)):
            which = (index + offset) % len(runs)
            results[which].append(runs[which]())
    return results


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def show(label: str, values: list[float], unit: str = "", digits: int = 2) -> str:
    s = spread(values)
    runs = ", ".join(f"{v:,.{digits}f}" for v in values)
    return (
        f"{label}: median {s['median']:,.{digits}f}{unit}, min {s['min']:,.{digits}f}{unit} "
        f"(runs: {runs})"
    )


def record(name: str, args: dict[str, Any], figures: dict[str, Any]) -> Path:
    """Write the figures as JSON, with the commit and the arguments; returns the path."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = BENCH_DIR / f"{name}-{stamp}.json"
    document = {
        "benchmark": name,
        "git_sha": git_sha(),
        "measured_at": stamp,
        "args": args,
        "figures": figures,
    }
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"\nfigures written to {path.relative_to(ROOT)}")
    return path


def forget_policy_history(dsn: str, policy: str) -> None:
    """Drop a bench policy's earlier runs and windows, so window sizing starts from the
    planner's default rate instead of what earlier runs of the bench measured."""
    from retention.db.connection import connect_dsn

    with connect_dsn(dsn) as conn, conn.transaction():
        conn.execute("DELETE FROM retention.windows WHERE policy = %s", (policy,))
        conn.execute("DELETE FROM retention.runs WHERE policy = %s", (policy,))


@dataclass(frozen=True)
class WindowedRun:
    """One plan and its windows, deleted by ``workers`` threads (a pool of that many slots)."""

    windows: list[Window]
    results: list[WindowResult]
    plan_seconds: float
    delete_seconds: float


def run_windows(
    dsn: str,
    policy: Policy,
    *,
    cutoff: dt.datetime,
    logical_date: dt.datetime,
    window_rows: int | None,
    batch_rows: int,
    workers: int,
) -> WindowedRun:
    """Plan the policy's windows, then delete them with ``workers`` threads, each on its
    own connection, as mapped tasks in a pool of ``workers`` slots would."""
    from devtools.plans import request
    from retention.db.connection import connect_dsn
    from retention.rows.deleter import delete_window
    from retention.rows.planner import plan_windows

    run_id = f"bench-{time.time_ns()}"
    with connect_dsn(dsn) as conn:
        began = time.perf_counter()
        windows = plan_windows(
            conn,
            request(
                policy,
                run_id,
                run_id,
                cutoff=cutoff,
                logical_date=logical_date,
                window_rows=window_rows,
                batch_rows=batch_rows,
                min_windows=workers,
            ),
        )
        plan_seconds = time.perf_counter() - began

    def work(window: Window) -> WindowResult:
        with connect_dsn(dsn) as worker:
            return delete_window(worker, policy, window, batch_rows=batch_rows, dry_run=False)

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(work, windows))
    return WindowedRun(windows, results, plan_seconds, time.perf_counter() - began)


def seed_identical_tables(
    dsn: str,
    tables: tuple[str, ...],
    *,
    rows: int,
    end: dt.datetime,
    days: int,
    autovacuum: bool = True,
) -> None:
    """Event logs of ``rows`` rows in each of ``tables`` (public schema), alike row for row,
    vacuumed and analysed, so that the deletions compared start from equal tables.
    ``autovacuum=False`` keeps autovacuum off them (a long benchmark's own measurement)."""
    from psycopg import sql

    from devtools.seed import seed_event_logs
    from retention.db.connection import connect_dsn
    from retention.db.migrate import migrate

    with connect_dsn(dsn) as conn:
        migrate(conn)
        for table in tables:
            seed_event_logs(conn, table=f"public.{table}", rows=rows, end=end, days=days)
            ident = sql.Identifier("public", table)
            if not autovacuum:
                conn.execute(
                    sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(ident)
                )
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(ident))


def count_older(conn: Any, table: str, cutoff: dt.datetime) -> int:
    """Rows of ``public.<table>`` older than ``cutoff`` (``created_at``)."""
    from psycopg import sql

    row = conn.execute(
        sql.SQL("SELECT count(*) AS n FROM {} WHERE created_at < %s").format(
            sql.Identifier("public", table)
        ),
        (cutoff,),
    ).fetchone()
    return int(row["n"]) if row else 0
