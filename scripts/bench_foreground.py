"""`make bench-foreground`: an application's latency idle, during one DELETE, and during the
window deleter.

Each of ``--repeat`` rounds seeds two identical ``--rows``-row event logs (20
tenants, round-robin, 60 days; PK, ``created_at`` and ``(tenant_id, id)``
indexes; ``VACUUM ANALYZE``), then runs three phases, each after a
``CHECKPOINT``, while a fixed-rate foreground load works on the table of the
phase:

- **idle**: the load alone, on the window deleter's table, before its cleanup;
- **single DELETE**: one ``DELETE ... WHERE created_at < cutoff`` of the older
  half, in one transaction, on the other table;
- **window deleter**: the project's planner and row deleter on the window
  deleter's table, with the policy's defaults (``health:`` defaults, the first
  batch ``batch_rows``, later ones sized to ``target_batch_ms``, windows sized
  by time), two windows at once as a pool of 2 slots would run them. The
  load's sessions are not retention's, so the gate sees other clients at work
  and paces the windows by ``health.busy_sleep_ratio``; ``--busy-sleep-ratio
  0`` measures them flat out (and ``--sleep-ratio``, ``--target-batch-ms``
  other trades). Every round forgets the bench policy's earlier windows, so
  its windows are sized alike.

The two cleanup phases alternate their order from round to round; a cleaned
table is checked (nothing older than the cutoff left) and dropped before the
next phase, so its autovacuum does not run into the next one.

**The load** is ``--rate`` operations a second (default 200) from ``--clients``
client processes (default 2), each with its own connection (autocommit, so each
insert commits on its own). A process per client keeps the load's timing away
from the interpreter lock of the deleter's threads and of the other client.
Each client sends on a fixed schedule (open loop), interleaved with the
others: operation *i* of client *c* is due at ``start + c/rate + i·clients/rate``.
A client that falls behind sends at once until it catches up. The mix is 60%
point reads by primary key (keys drawn from the whole seeded range, so half of
them fall on rows the cleanup deletes), 20% inserts of young rows (newer than
the cutoff), and 20% tenant reads (the newest 50 rows of one tenant by
``created_at``). Every phase draws the same sequence of operations.

**Latency** is measured two ways: from the operation's scheduled time to its
completion (so time spent waiting behind a slow earlier operation counts: no
coordinated omission), and from its actual send (service time). Percentiles
are nearest-rank. The first second of every phase is warm-up and not counted.
The idle phase counts the ``--seconds`` after it. A cleanup phase counts only
the operations scheduled while the cleanup ran (for the window deleter:
planning plus the windows), however short; the load goes on until
``--seconds`` after the warm-up (or the cleanup's end, if later) and the
operations after the cleanup are shown apart. Client and server share the
machine, so CPU the cleanup takes from the client shows in both figures.

It prints each phase's figures per round, the ratio of each p95 to the idle
p95, and over the rounds the median ratio and the ratio of the pooled
samples. Figures go to ``.local/bench/bench_foreground-*.json`` with the git SHA.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import math
import multiprocessing
import os
import random
import statistics
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection as Pipe
from typing import Any

import psycopg
from benchlib import (
    count_older,
    forget_policy_history,
    record,
    run_windows,
    seed_identical_tables,
    show,
)
from psycopg import sql

from retention.db.connection import connect_dsn
from retention.policy import Policy, parse_policy

END = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CUTOFF = END - dt.timedelta(days=30)
PLAIN, WINDOWED = "bench_fg_plain", "bench_fg_windowed"
CLIENT_ANSWER_SECONDS = 600.0  # a phase is minutes at most; a silent client is stuck
TENANTS = 20
TENANT_READ_ROWS = 50
KINDS = ("point", "insert", "tenant")
MIX = (0.6, 0.2, 0.2)  # shares of KINDS
WARMUP_S = 1.0
LEAD_S = 0.2  # between handing a phase to the clients and its first operation
WORKERS = 2  # windows at a time: the retention_db pool's 2 slots

# scheduled (monotonic s), kind, from schedule, from send, woke late (all in s)
Sample = tuple[float, int, float, float, float]


@dataclass(frozen=True)
class Load:
    """One phase of foreground load, as handed to every client process."""

    table: str
    start: float  # time.monotonic() of the first operation (one clock for all processes)
    first_id: int  # inserts use first_id + client, + clients, ...
    keys: int  # point reads draw keys from 1..keys
    rate: float  # operations a second, all clients together
    clients: int


def run_client(conn: psycopg.Connection[Any], load: Load, client: int, stop_at: Any) -> tuple:
    """Send this client's share of ``load`` until the schedule passes ``stop_at.value``."""
    table = sql.Identifier("public", load.table)
    statements = (
        sql.SQL("SELECT id, tenant_id, created_at, payload FROM {} WHERE id = %s").format(table),
        sql.SQL(
            "INSERT INTO {} (id, tenant_id, created_at, payload) VALUES (%s, %s, %s, %s)"
        ).format(table),
        sql.SQL(
            "SELECT id, created_at, payload FROM {} WHERE tenant_id = %s "
            "ORDER BY created_at DESC LIMIT %s"
        ).format(table),
    )
    rng = random.Random(client)  # the same operations, in the same order, in every phase
    interval = load.clients / load.rate
    first = load.start + client / load.rate
    samples: list[Sample] = []
    inserts = 0
    done = -math.inf
    for i in itertools.count():
        scheduled = first + i * interval
        if scheduled >= stop_at.value:
            break
        draw, key, tenant = rng.random(), rng.randint(1, load.keys), rng.randint(1, TENANTS)
        kind = 0 if draw < MIX[0] else 1 if draw < MIX[0] + MIX[1] else 2
        if kind == 1:
            key = load.first_id + client + inserts * load.clients
            inserts += 1
        wait = scheduled - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        sent = time.monotonic()
        woke_late = sent - max(scheduled, done)  # not queueing behind our own last op
        if kind == 0:
            conn.execute(statements[0], (key,)).fetchall()
        elif kind == 1:
            young = END + dt.timedelta(seconds=scheduled - load.start)
            conn.execute(statements[1], (key, tenant, young, f"foreground {key}"))
        else:
            conn.execute(statements[2], (tenant, TENANT_READ_ROWS)).fetchall()
        done = time.monotonic()
        samples.append((scheduled, kind, done - scheduled, done - sent, woke_late))
    return samples, inserts


def client_process(pipe: Pipe, dsn: str, client: int, stop_at: Any) -> None:
    """One foreground client: its own connection, one phase per message until None."""
    try:
        with psycopg.connect(dsn, autocommit=True, application_name="bench_foreground") as conn:
            conn.execute("SELECT 1")
            pipe.send("ready")
            while (load := pipe.recv()) is not None:
                pipe.send(run_client(conn, load, client, stop_at))
    except Exception as error:  # hand the failure to the parent, which stops the benchmark
        pipe.send(f"client {client} failed: {type(error).__name__}: {error}")


class Clients:
    """The foreground client processes, started once and reused by every phase."""

    def __init__(self, dsn: str, count: int) -> None:
        context = multiprocessing.get_context("spawn")  # no inherited sockets or threads
        self.count = count
        self.stop_at = context.RawValue("d", math.inf)
        self.pipes: list[Pipe] = []
        self.processes = []
        for client in range(count):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=client_process, args=(theirs, dsn, client, self.stop_at), daemon=True
            )
            process.start()
            self.pipes.append(ours)
            self.processes.append(process)
        for pipe in self.pipes:
            self._answer(pipe)

    @staticmethod
    def _answer(pipe: Pipe) -> Any:
        if not pipe.poll(CLIENT_ANSWER_SECONDS):
            raise SystemExit(f"a client did not answer within {CLIENT_ANSWER_SECONDS:g} s")
        answer = pipe.recv()
        if isinstance(answer, str) and answer != "ready":
            raise SystemExit(answer)
        return answer

    def start(self, load: Load) -> None:
        self.stop_at.value = math.inf
        for pipe in self.pipes:
            pipe.send(load)

    def finish(self, at: float) -> tuple[list[Sample], int]:
        """Stop scheduling at ``at`` (operations due before it are still sent); all samples."""
        self.stop_at.value = at
        samples: list[Sample] = []
        most_inserts = 0
        for pipe in self.pipes:
            client_samples, inserts = self._answer(pipe)
            samples.extend(client_samples)
            most_inserts = max(most_inserts, inserts)
        return samples, most_inserts

    def close(self) -> None:
        self.stop_at.value = -math.inf  # ends a phase left running by an error
        for pipe in self.pipes:
            with suppress(OSError):  # a client that died has closed its end
                pipe.send(None)
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


def bench_policy(overrides: dict[str, Any] | None = None) -> Policy:
    """The policy's defaults (health, batch timing, windows sized by time), unless
    ``--sleep-ratio``, ``--busy-sleep-ratio`` or ``--target-batch-ms`` override them
    to measure the trade."""
    policy, problems = parse_policy(
        "bench_foreground",
        {
            "schedule": None,
            "start_date": "2026-01-01",
            "retain_days": 30,
            "postgres_conn_id": "unused",
            "table": f"public.{WINDOWED}",
            "key_column": "id",
            "timestamp_column": "created_at",
            "tenant_column": "tenant_id",
            **(overrides or {}),
        },
    )
    if policy is None:
        raise SystemExit(f"bench policy invalid: {problems}")
    return policy


def drop_tables(dsn: str) -> None:
    """Leave no bench table behind, whatever stopped the run."""
    with connect_dsn(dsn) as conn:
        for table in (WINDOWED, PLAIN):
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def seed_pair(dsn: str, rows: int) -> int:
    seed_identical_tables(dsn, (WINDOWED, PLAIN), rows=rows, end=END, days=60)
    with connect_dsn(dsn) as conn:
        return count_older(conn, PLAIN, CUTOFF)


def old_left(dsn: str, table: str) -> int:
    with connect_dsn(dsn) as conn:
        return count_older(conn, table, CUTOFF)


def single_delete(dsn: str) -> Callable[[], dict[str, Any]]:
    conn = connect_dsn(dsn)  # opened before the phase; the clock starts at BEGIN

    def run() -> dict[str, Any]:
        with conn:
            with conn.transaction():
                deleted = conn.execute(
                    sql.SQL("DELETE FROM {} WHERE created_at < %s").format(sql.Identifier(PLAIN)),
                    (CUTOFF,),
                ).rowcount
            return {"rows_deleted": deleted, "transactions": 1}

    return run


def window_deleter(dsn: str, overrides: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    policy = bench_policy(overrides)

    def run() -> dict[str, Any]:
        windowed = run_windows(
            dsn,
            policy,
            cutoff=CUTOFF,
            logical_date=END,
            window_rows=policy.window_rows,
            batch_rows=policy.batch_rows,
            workers=WORKERS,
        )
        results = windowed.results
        return {
            "rows_deleted": sum(r.rows_deleted for r in results),
            "plan_s": windowed.plan_seconds,
            "windows": len(windowed.windows),
            "transactions": sum(r.batches for r in results),
            "longest_transaction_ms": max((r.longest_batch_ms for r in results), default=0.0),
            "timeouts": sum(r.timeouts for r in results),
            "pauses": sum(int(r.pause.get("pauses", 0)) for r in results),
            "paused_s": sum(float(r.pause.get("paused_seconds", 0.0)) for r in results),
            "paced_s": sum(float(r.pause.get("paced_seconds", 0.0)) for r in results),
        }

    return run


def rank(ordered: list[float], share: float) -> float:
    """Nearest-rank percentile of sorted values (NaN when there are none)."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def latencies(samples: list[Sample]) -> dict[str, Any]:
    """p50/p95/p99/max in ms from schedule, from send, and of the client's own lateness
    (send - max(schedule, its previous op's end)); p95 by kind from schedule."""
    figures: dict[str, Any] = {"ops": len(samples)}
    for name, column in (("schedule_ms", 2), ("send_ms", 3), ("woke_late_ms", 4)):
        ordered = sorted(s[column] * 1000 for s in samples)
        figures[name] = {
            "p50": rank(ordered, 0.50),
            "p95": rank(ordered, 0.95),
            "p99": rank(ordered, 0.99),
            "max": ordered[-1] if ordered else math.nan,
        }
    figures["p95_by_kind_ms"] = {
        kind: rank(sorted(s[2] * 1000 for s in samples if s[1] == index), 0.95)
        for index, kind in enumerate(KINDS)
    }
    return figures


def checkpoint(dsn: str) -> None:
    with connect_dsn(dsn) as conn:
        conn.execute("CHECKPOINT")


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def run_phase(
    dsn: str,
    clients: Clients,
    args: argparse.Namespace,
    table: str,
    first_id: int,
    cleanup: Callable[[], dict[str, Any]] | None,
) -> tuple[dict[str, Any], list[Sample], int]:
    """One phase: the load on ``table`` with or without a cleanup; figures, samples, inserts."""
    checkpoint(dsn)
    start = time.monotonic() + LEAD_S
    clients.start(Load(table, start, first_id, args.rows, args.rate, clients.count))
    counted_from = start + WARMUP_S
    sleep_until(counted_from)
    outcome: dict[str, Any] = {}
    if cleanup is None:
        began, ended = counted_from, counted_from + args.seconds
    else:
        began = time.monotonic()
        outcome = cleanup()
        ended = time.monotonic()
    phase_end = max(counted_from + args.seconds, ended)
    sleep_until(phase_end)
    samples, inserts = clients.finish(phase_end)
    during = [s for s in samples if began <= s[0] < ended]
    after = [s for s in samples if ended <= s[0]]
    late = sum(1 for s in during if s[2] - s[3] > clients.count / args.rate)
    figures = {
        "table": table,
        "ops_in_phase": len(samples),
        "measured_s": ended - began,
        "ops_sent_late": late,  # sent more than one client interval after their schedule
        **latencies(during),
        "after": latencies(after) if cleanup is not None else None,
        "cleanup": outcome,
    }
    return figures, during, inserts


def ms(figures: dict[str, float]) -> str:
    return " ".join(f"{k} {figures[k]:,.2f}" for k in ("p50", "p95", "p99", "max")) + " ms"


def describe(name: str, figures: dict[str, Any], idle: dict[str, Any] | None) -> list[str]:
    cleanup = figures["cleanup"]
    if not cleanup:
        head = f"  {name}: {figures['ops']:,} ops over {figures['measured_s']:.1f} s"
    else:
        extra = ""
        if "windows" in cleanup:
            extra = (
                f" (planning {cleanup['plan_s']:.2f} s), {cleanup['windows']} windows, "
                f"{cleanup['transactions']:,} transactions, longest "
                f"{cleanup['longest_transaction_ms']:,.0f} ms, {cleanup['timeouts']} timeouts, "
                f"{cleanup['pauses']} pauses, paced {cleanup['paced_s']:.2f} s (both windows)"
            )
        head = (
            f"  {name}: {cleanup['rows_deleted']:,} rows in {figures['measured_s']:.2f} s"
            f"{extra}; {figures['ops']:,} ops were due while it ran"
        )
    by_kind = ", ".join(f"{k} {v:,.2f}" for k, v in figures["p95_by_kind_ms"].items())
    lines = [
        head,
        f"    from schedule: {ms(figures['schedule_ms'])}",
        f"    from send:     {ms(figures['send_ms'])}",
        f"    p95 by kind, from schedule: {by_kind} ms; sent late (> one interval): "
        f"{figures['ops_sent_late']:,} of {figures['ops']:,}",
        f"    client woke late (CPU, not queueing): {ms(figures['woke_late_ms'])}",
    ]
    if idle is not None:
        lines.append(
            f"    p95 ÷ idle p95: {ratio(figures, idle, 'schedule_ms'):.2f} from schedule, "
            f"{ratio(figures, idle, 'send_ms'):.2f} from send"
        )
    if figures["after"] is not None:
        after = figures["after"]
        lines.append(
            f"    after it, to the phase's end ({after['ops']:,} ops): from schedule "
            f"{ms(after['schedule_ms'])}"
        )
    if cleanup and figures["ops"] < 1000:
        lines.append(
            f"    note: {figures['ops']:,} ops; p99 is the {slowest(figures['ops'], 0.99)}, "
            f"p95 the {slowest(figures['ops'], 0.95)}"
        )
    return lines


def slowest(count: int, share: float) -> str:
    """Which value the nearest-rank percentile is, counted from the slowest."""
    nth = count - math.ceil(share * count) + 1
    if nth == 1:
        return "slowest op"
    suffix = "th" if 10 <= nth % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(nth % 10, "th")
    return f"{nth}{suffix} slowest op"


def ratio(figures: dict[str, Any], idle: dict[str, Any], column: str) -> float:
    return figures[column]["p95"] / idle[column]["p95"]


def measure(dsn: str, clients: Clients, args: argparse.Namespace) -> dict[str, Any]:
    """One round: seed the pair, then idle, and the two cleanups in this round's order.

    Every round forgets the bench policy's earlier windows, so its windows are
    sized alike (at the planner's default rate), whatever ran before.
    """
    forget_policy_history(dsn, bench_policy().name)
    eligible = seed_pair(dsn, args.rows)
    next_id = {WINDOWED: args.rows + 1, PLAIN: args.rows + 1}
    phases: list[tuple[str, str, Callable[[], Callable[[], dict[str, Any]]] | None]] = [
        ("idle", WINDOWED, None)
    ]
    cleanups = [
        ("single DELETE", PLAIN, lambda: single_delete(dsn)),
        ("window deleter", WINDOWED, lambda: window_deleter(dsn, policy_overrides(args))),
    ]
    phases += cleanups if args.round % 2 == 0 else cleanups[::-1]
    figures: dict[str, Any] = {"eligible": eligible, "order": [p[0] for p in phases]}
    samples: dict[str, list[Sample]] = {}
    for name, table, make in phases:
        phase, samples[name], inserts = run_phase(
            dsn, clients, args, table, next_id[table], make() if make else None
        )
        next_id[table] += inserts * clients.count + clients.count
        if make is not None:
            left = old_left(dsn, table)
            if left or phase["cleanup"]["rows_deleted"] != eligible:
                raise SystemExit(f"{name}: {left} old rows left, {phase['cleanup']=}, {eligible=}")
            with connect_dsn(dsn) as conn:  # its autovacuum must not run into the next phase
                conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
        figures[name] = phase
    return {"figures": figures, "samples": samples}


def policy_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The policy fields the command line changes (none by default: the policy's defaults)."""
    overrides: dict[str, Any] = {}
    health = {
        name: value
        for name, value in (
            ("sleep_ratio", args.sleep_ratio),
            ("busy_sleep_ratio", args.busy_sleep_ratio),
        )
        if value is not None
    }
    if health:
        overrides["health"] = health
    if args.target_batch_ms is not None:
        overrides["target_batch_ms"] = args.target_batch_ms
    return overrides


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows per table")
    parser.add_argument("--seconds", type=float, default=20.0, help="counted length of a phase")
    parser.add_argument("--rate", type=float, default=200.0, help="operations/s, all clients")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, alternating the order")
    parser.add_argument(
        "--sleep-ratio", type=float, help="health.sleep_ratio (default: the policy default)"
    )
    parser.add_argument(
        "--busy-sleep-ratio",
        type=float,
        help="health.busy_sleep_ratio (default: the policy default)",
    )
    parser.add_argument(
        "--target-batch-ms", type=int, help="target_batch_ms (default: the policy default)"
    )
    args = parser.parse_args()
    dsn = os.environ["RETENTION_DEMO_DSN"]
    print(
        f"rows={args.rows:,} (the older half is deleted) seconds={args.seconds:g} per phase "
        f"(+{WARMUP_S:g} s warm-up) rate={args.rate:g} ops/s from {args.clients} client "
        f"processes; mix {MIX[0]:.0%} point reads, {MIX[1]:.0%} inserts, {MIX[2]:.0%} tenant "
        f"reads (newest {TENANT_READ_ROWS}); window deleter: "
        f"{policy_overrides(args) or 'policy defaults'}, {WORKERS} workers; repeat={args.repeat}"
    )
    clients = Clients(dsn, args.clients)
    rounds = []
    try:
        for number in range(args.repeat):
            args.round = number
            result = measure(dsn, clients, args)
            rounds.append(result)
            figures = result["figures"]
            print(f"\n== round {number + 1}: {', '.join(figures['order'])}")
            for name in figures["order"]:
                idle = figures["idle"] if name != "idle" else None
                print("\n".join(describe(name, figures[name], idle)))
    finally:
        clients.close()
        drop_tables(dsn)
    names = ("single DELETE", "window deleter")
    summary: dict[str, Any] = {}
    print(f"\n== over {args.repeat} rounds")
    idle_p95 = [r["figures"]["idle"]["schedule_ms"]["p95"] for r in rounds]
    print(show("idle p95 from schedule", idle_p95, " ms"))
    pooled_idle = latencies([s for r in rounds for s in r["samples"]["idle"]])
    for name in names:
        phases = [r["figures"][name] for r in rounds]
        idles = [r["figures"]["idle"] for r in rounds]
        by_schedule = [ratio(p, i, "schedule_ms") for p, i in zip(phases, idles, strict=True)]
        by_send = [ratio(p, i, "send_ms") for p, i in zip(phases, idles, strict=True)]
        pooled = latencies([s for r in rounds for s in r["samples"][name]])
        print(show(f"{name} seconds", [p["measured_s"] for p in phases]))
        print(show(f"{name} p95 ÷ idle p95, from schedule", by_schedule))
        print(show(f"{name} p95 ÷ idle p95, from send", by_send))
        pooled_ratio = pooled["schedule_ms"]["p95"] / pooled_idle["schedule_ms"]["p95"]
        print(
            f"{name}, all rounds' samples pooled ({pooled['ops']:,} ops against "
            f"{pooled_idle['ops']:,} idle): from schedule {ms(pooled['schedule_ms'])}; "
            f"p95 ÷ idle p95 {pooled_ratio:.2f}"
        )
        summary[name] = {
            "seconds": [p["measured_s"] for p in phases],
            "p95_ratio_schedule": by_schedule,
            "p95_ratio_send": by_send,
            "pooled": pooled,
            "pooled_p95_ratio_schedule": pooled_ratio,
        }
    summary["pooled_idle"] = pooled_idle
    headline = statistics.median(summary["window deleter"]["p95_ratio_schedule"])
    print(
        f"\np95 with the window deleter ÷ idle p95 = {headline:.2f} (target < 1.5; from "
        f"schedule, median of {args.repeat} rounds; pooled "
        f"{summary['window deleter']['pooled_p95_ratio_schedule']:.2f})"
    )
    record(
        "bench_foreground",
        {k: v for k, v in vars(args).items() if k != "round"},
        {"rounds": [r["figures"] for r in rounds], "summary": summary, "target_ratio": headline},
    )


if __name__ == "__main__":
    main()
