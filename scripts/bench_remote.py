"""`make bench-remote`: remote deletions against the sandbox API, and the ledger alone.

Part 1: four concurrent callers (threads, each with its own Postgres connection
and HTTP session, like four mapped tasks) work a backlog of operations against
the sandbox API on loopback whose limit equals the policy's rate (100/s), for
60 seconds. Prints achieved confirmed deletions per second divided by the
allowed rate, and the share of requests answered 429.

Part 2: the same workers with the HTTP call replaced by an in-process stub that
answers 204 at once and a limiter far above what they can reach, so what is
measured is the ledger: claim (SKIP LOCKED), token, record the outcome and
delete the row, per operation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import threading
import time

from retention.db.connection import connect_dsn
from retention.db.migrate import migrate
from retention.objects.deleter import work_operations
from retention.objects.operations import OperationsKind, enqueue_window
from retention.policy import Policy, parse_policy
from retention.queue.http import HttpResult, HttpSender, plain_sender
from retention.rows.planner import plan_windows
from tests.support.sandbox_api import SandboxServer
from tests.support.seed import seed_media_assets
from tests.support.tables import request

END = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class StubSender(HttpSender):
    """Answers every call with 204 immediately (no network)."""

    def __init__(self) -> None:
        pass

    def send(self, method, endpoint, *, headers=None, body=None) -> HttpResult:  # type: ignore[no-untyped-def]
        now = time.time()
        return HttpResult(204, {}, started=now, finished=now)

    def close(self) -> None:
        pass


def make_policy(name: str, rate: float, burst: int, claim_batch: int) -> Policy:
    policy, problems = parse_policy(
        name,
        {
            "schedule": None,
            "start_date": "2026-01-01",
            "retain_days": 1,
            "postgres_conn_id": "unused",
            "table": f"public.{name}",
            "key_column": "id",
            "timestamp_column": "created_at",
            "window_rows": 1_000_000,
            "batch_rows": 5000,
            "remote": {
                "http_conn_id": "bench_sandbox",
                "endpoint": "/v1/assets/{object_id}",
                "object_id_column": "object_key",
                "rate_per_second": rate,
                "burst": burst,
                "limiter_scope": f"{name}-{time.time_ns()}",
                "pool": "default_pool",
                "claim_batch": claim_batch,
                "request_timeout_seconds": 5,
            },
        },
    )
    if policy is None:
        raise SystemExit(f"bench policy invalid: {problems}")
    return policy


def backlog(dsn: str, policy: Policy, rows: int) -> None:
    """A table of ``rows`` eligible media rows, all enqueued as pending operations."""
    with connect_dsn(dsn) as conn:
        migrate(conn)
        seed_media_assets(conn, table=str(policy.table), rows=rows, end=END, days=10)
        conn.execute("DELETE FROM retention.operations WHERE policy = %s", (policy.name,))
        conn.execute("DELETE FROM retention.attempts WHERE policy = %s", (policy.name,))
        run_id = f"bench-{time.time_ns()}"
        windows = plan_windows(conn, request(policy, run_id, run_id, cutoff=END, logical_date=END))
        for window in windows:
            enqueue_window(conn, policy, window, 5000)


def run_callers(dsn: str, policy: Policy, callers: int, seconds: float, url: str | None) -> float:
    """``callers`` workers until ``seconds`` pass or no work is left; returns elapsed."""
    deadline = time.monotonic() + seconds
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            with connect_dsn(dsn) as conn:
                sender = plain_sender(url, 5) if url else StubSender()
                while (left := deadline - time.monotonic()) > 0:
                    stats = work_operations(
                        conn, OperationsKind(policy, sender), budget_seconds=left
                    )
                    if not stats.claimed:
                        return
        except BaseException as exc:
            errors.append(exc)

    began = time.monotonic()
    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--callers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--ledger-ops", type=int, default=20_000)
    parser.add_argument("--claim-batch", type=int, default=10)
    args = parser.parse_args()
    dsn = os.environ["RETENTION_DEMO_DSN"]

    policy = make_policy("bench_remote", args.rate, args.burst, args.claim_batch)
    backlog(dsn, policy, int(args.rate * args.seconds * 1.5))
    sandbox = SandboxServer(0, rate=args.rate, burst=args.rate).start()
    try:
        elapsed = run_callers(dsn, policy, args.callers, args.seconds, sandbox.url)
        stats = sandbox.state.stats()
    finally:
        sandbox.stop()
    confirmed = sum(1 for r in stats["requests"] if r["status"] in (200, 204, 404))
    achieved = confirmed / elapsed
    share_429 = stats["throttled"] / max(1, len(stats["requests"]))
    duplicates = sum(stats["effects"].values()) - len(stats["effects"])
    print(
        f"remote: {args.callers} callers, allowed {args.rate:g}/s (burst {args.burst}), "
        f"sandbox limit {args.rate:g}/s, {elapsed:.1f}s"
    )
    print(f"  confirmed deletions:   {confirmed:,} = {achieved:.1f}/s")
    print(f"  achieved / allowed:    {achieved / args.rate:.3f} (target >= 0.95)")
    print(
        f"  429 share:             {share_429:.2%} ({stats['throttled']} of "
        f"{len(stats['requests'])} requests; target <= 1%)"
    )
    print(f"  duplicate effects:     {duplicates}; idempotent repeats {stats['repeats']}")

    ledger_policy = make_policy("bench_ledger", 100_000, 100_000, args.claim_batch)
    backlog(dsn, ledger_policy, args.ledger_ops)
    elapsed = run_callers(dsn, ledger_policy, args.callers, 600, None)
    with connect_dsn(dsn) as conn:
        done = conn.execute(
            "SELECT count(*) AS n FROM retention.operations WHERE policy = %s AND state = 'done'",
            (ledger_policy.name,),
        ).fetchone()["n"]  # type: ignore[index]
        left = conn.execute("SELECT count(*) AS n FROM public.bench_ledger", ()).fetchone()["n"]  # type: ignore[index]
        conn.execute("DROP TABLE public.bench_ledger, public.bench_remote")
    print(
        f"ledger (HTTP stubbed): {done:,} operations claimed, recorded done and their rows "
        f"deleted by {args.callers} workers in {elapsed:.2f}s = {done / elapsed:,.0f} ops/s "
        f"(target >= 2,000; claim batch {args.claim_batch}); rows left {left}"
    )


if __name__ == "__main__":
    main()
