"""`make bench-remote`: remote deletions against the sandbox API, and the ledger alone.

Each of ``--repeat`` rounds (default 3) runs, each round in a rotated order:

- four concurrent callers (threads, each with its own Postgres connection and
  HTTP session, like four mapped tasks) working a backlog against the sandbox
  API on loopback whose limit equals the policy's rate (100/s) and whose burst
  equals the policy's (20), for ``--seconds``;
- the same against a sandbox whose real limit is half the policy's rate, and
  against one whose real limit is a third of it, which the limiter has to learn
  from 429s.

Deletions are counted from the ledger (done operations), not from the server's
answers. Then the ledger alone: the same workers with the HTTP call replaced by
an in-process stub that answers 204 at once and a limiter far above reach, so
what is measured is claim (SKIP LOCKED), token, the atomic finish (record, row
delete) per operation. Prints min and median; figures go to
``.local/bench/bench_remote-*.json`` with the git SHA.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import threading
import time

from benchlib import record, rotate, show, spread
from psycopg import sql

from devtools.plans import request
from devtools.sandbox_api import SandboxServer
from devtools.seed import seed_media_assets
from retention.db.connection import connect_dsn
from retention.db.migrate import migrate
from retention.objects.deleter import work_operations
from retention.objects.enqueue import enqueue_window
from retention.objects.kind import OperationsKind
from retention.policy import Policy, parse_policy
from retention.policy.model import RemoteSpec
from retention.queue.http import HttpResult, HttpSender, plain_sender
from retention.rows.planner import plan_windows

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
        # No child table: the API's pace, not the rows' foreign keys, is measured here.
        seed_media_assets(conn, table=str(policy.table), rows=rows, end=END, days=10, renditions=0)
        conn.execute("DELETE FROM retention.operations WHERE policy = %s", (policy.name,))
        conn.execute("DELETE FROM retention.attempts WHERE policy = %s", (policy.name,))
        # Every round starts from tables without the last round's dead rows.
        conn.execute("VACUUM (ANALYZE) retention.operations, retention.attempts")
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


def done_operations(dsn: str, policy: Policy) -> int:
    """Deletions as the ledger recorded them (done operations), not as the server answered."""
    with connect_dsn(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM retention.operations WHERE policy = %s AND state = 'done'",
            (policy.name,),
        ).fetchone()
    return int(row["n"]) if row else 0


def api_run(dsn: str, args: argparse.Namespace, name: str, limit: float) -> dict[str, float]:
    """Four callers against a sandbox whose real limit is ``limit`` and whose burst is the
    policy's (so the server can run out of tokens, as a real API does)."""
    policy = make_policy(name, args.rate, args.burst, args.claim_batch)
    backlog(dsn, policy, int(args.rate * args.seconds * 1.5))
    sandbox = SandboxServer(0, rate=limit, burst=args.burst).start()
    try:
        elapsed = run_callers(dsn, policy, args.callers, args.seconds, sandbox.url)
        stats = sandbox.state.stats()
    finally:
        sandbox.stop()
    done = done_operations(dsn, policy)
    with connect_dsn(dsn) as conn:
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier("public", name)))
    return {
        "elapsed_s": elapsed,
        "done": done,
        "per_second": done / elapsed,
        "of_allowed": done / elapsed / args.rate,
        "of_real_limit": done / elapsed / limit,
        "requests": len(stats["requests"]),
        "share_429": stats["throttled"] / max(1, len(stats["requests"])),
        "duplicate_effects": sum(stats["effects"].values()) - len(stats["effects"]),
    }


def ledger_run(dsn: str, args: argparse.Namespace) -> float:
    """The ledger alone: HTTP stubbed, a limiter far above reach; operations per second."""
    policy = make_policy("bench_ledger", 100_000, 100_000, args.claim_batch)
    backlog(dsn, policy, args.ledger_ops)
    elapsed = run_callers(dsn, policy, args.callers, 600, None)
    done = done_operations(dsn, policy)
    with connect_dsn(dsn) as conn:
        left = conn.execute("SELECT count(*) AS n FROM public.bench_ledger").fetchone()
        conn.execute("DROP TABLE public.bench_ledger")
    if done != args.ledger_ops or (left and left["n"]):
        raise SystemExit(f"ledger run: {done} done of {args.ledger_ops}, rows left {left}")
    return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--callers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--ledger-ops", type=int, default=20_000)
    parser.add_argument(
        "--claim-batch",
        type=int,
        default=RemoteSpec.model_fields["claim_batch"].default,
        help="operations claimed and recorded at once (default: the policy default)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="rounds, alternating the order")
    args = parser.parse_args()
    dsn = os.environ["RETENTION_DEMO_DSN"]
    print(
        f"{args.callers} callers, policy rate {args.rate:g}/s (burst {args.burst}), "
        f"{args.seconds:g} s per API run, {args.repeat} rounds"
    )
    equal, half, third = rotate(
        args.repeat,
        lambda: api_run(dsn, args, "bench_remote_equal", args.rate),
        lambda: api_run(dsn, args, "bench_remote_half", args.rate / 2),
        lambda: api_run(dsn, args, "bench_remote_third", args.rate / 3),
    )
    ledger = [ledger_run(dsn, args) for _ in range(args.repeat)]
    print(f"\n== API limit = policy rate ({args.rate:g}/s, sandbox burst {args.burst})")
    print(show("deletions/s (ledger)", [r["per_second"] for r in equal], digits=1))
    print(show("achieved / allowed", [r["of_allowed"] for r in equal], digits=3))
    print(show("429 share", [100 * r["share_429"] for r in equal], "%"))
    print(f"duplicate remote effects: {sum(r['duplicate_effects'] for r in equal)}")
    for runs, divisor, words in ((half, 2, "half"), (third, 3, "a third of")):
        print(f"\n== API limit = {words} the policy rate ({args.rate / divisor:g}/s)")
        print(show("deletions/s (ledger)", [r["per_second"] for r in runs], digits=1))
        print(show("achieved / real limit", [r["of_real_limit"] for r in runs], digits=3))
        print(show("429 share", [100 * r["share_429"] for r in runs], "%"))
        print(f"duplicate remote effects: {sum(r['duplicate_effects'] for r in runs)}")
    print(
        f"\n== ledger alone, HTTP stubbed ({args.ledger_ops:,} operations, {args.callers} workers)"
    )
    print(show("operations/s", ledger, digits=0))
    record(
        "bench_remote",
        vars(args),
        {
            "equal_limit": {
                "rounds": equal,
                "of_allowed": spread([r["of_allowed"] for r in equal]),
                "share_429": spread([r["share_429"] for r in equal]),
            },
            **{
                key: {
                    "rounds": runs,
                    "of_real_limit": spread([r["of_real_limit"] for r in runs]),
                    "share_429": spread([r["share_429"] for r in runs]),
                }
                for key, runs in (("half_limit", half), ("third_limit", third))
            },
            "ledger_ops_per_second": {"rounds": ledger, **spread(ledger)},
        },
    )


if __name__ == "__main__":
    main()
