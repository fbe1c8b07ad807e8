"""`make bench-scale`: one policy's DAG through the real scheduler against one plain DELETE.

It seeds two identical event logs of ``--rows`` rows (default 10,000,000; 20
tenants round-robin, 60 days; primary key, ``created_at`` and
``(tenant_id, id)`` indexes; ``VACUUM ANALYZE``) in the demo database, and
deletes the older half of each: of one through the policy's DAG
``retention__bench_scale`` under Airflow's own processes, of the other with one
``DELETE ... WHERE created_at < cutoff`` (BEGIN to COMMIT, timed by this
script). The default layout applies: key-range windows, sized by
``target_window_seconds`` from the rate the policy's earlier windows measured
(``--history clear`` forgets them first: the planner then assumes its cautious
default rate), at least 2 windows for the 2 pool slots.

Airflow runs as a deployment runs it, each in its own process: the api-server
(``--apps execution``), the dag-processor and the scheduler, with the
LocalExecutor (``--executor celery``: the CeleryExecutor, with the broker that
``devtools.airflow_services`` names (``RETENTION_CELERY_BROKER_URL``, else
Redis on 127.0.0.1:6379) and its two workers of two slots each). Their Airflow
home is a temporary folder and their metadata database is the bench's own (the
local metadata database's name plus ``_bench``, created and migrated here), so
neither the tests nor ``make airflow`` share it. Scheduler and dag-processor settings are
those of ``.local/env`` and otherwise Airflow's defaults (nothing is tuned for
the bench). The pool ``retention_db`` has 2 slots, as in
``airflow_settings.yaml``. The policies file, written to the temporary home,
holds the one policy. The run is triggered with ``logical_date`` and
``run_after`` at the end of the seeded data, so its cutoff (``data_interval_end``
minus ``retain_days`` 30) falls on the middle of the 60 days.

Every figure is read from Airflow's metadata database or the retention ledger
(``retention.runs``, ``retention.windows``), never from this script's clock,
except the single DELETE's time:

- **planning**: ``retention.runs.plan_seconds`` (the planner's own time, inside
  the task), and the ``plan_windows`` task instance's duration (start to end);
- **summed delete work**: the sum of ``retention.windows.seconds`` (each
  window's time by the deleter's own clock, from marking it running to the
  end of its last batch), and the sum of the ``delete_window`` task instances'
  durations;
- **windows' critical path**: the windows' recorded work list-scheduled in
  window order on the pool's 2 slots (each window to the slot that frees
  first): how long the deletes would take if Airflow started every window the
  instant a slot freed;
- **DAG run wall time**: ``dag_run.end_date - dag_run.start_date`` (and
  ``queued_at`` to ``start_date`` besides);
- **Airflow overhead** = wall time - (planning + windows' critical path): the
  part of the run in which no planning or deleting happened. It includes the
  small tasks (``migrate_schema``, ``compute_cutoff``, ``drop_partitions``),
  task start-up, scheduling gaps, and ``reconcile``'s count of what is left
  (``retention.runs.reconcile_seconds``, shown separately);
- **total ratio** = DAG run wall time / single DELETE time (target: under 1.5);
  the planning share is planning / wall time (target: under 5%).

A timeline splits the wall time into consecutive stretches between task
instances' start and end dates, which add up to it exactly.

Before the measured rounds, one unmeasured run of the same DAG on a 1,000-row
table warms the executor: the first task after a scheduler starts is slow (its
log shows seconds before its DAG file is even loaded, against under a second
for every later task), a cost a long-running deployment pays once, not per run.
The warm-up's wall time is printed and recorded; ``--no-warmup`` measures the
cold run instead. Its windows hold under 1,000 rows, which window sizing never
reads.

Both deletions start from a CHECKPOINT; autovacuum is off on the two bench
tables, so that vacuuming the first deletion's dead rows does not run during the
second. The single DELETE runs while the Airflow processes are up and idle, on
the same machine as the DAG's work. ``--repeat`` rounds (default 1: each round
seeds 2 × ``--rows`` rows) alternate the order, the DAG first in even rounds.
The script checks that both tables end with no row older than the cutoff and
the same rows kept, and that the ledger counted the same deletions. Figures go
to ``.local/bench/bench_scale-*.json`` with the git SHA.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import yaml
from benchlib import count_older, forget_policy_history, record, seed_identical_tables, show, spread
from psycopg import sql

from devtools.airflow_services import (
    AIRFLOW,
    airflow_process,
    api_server,
    broker_unreachable,
    celery_broker_url,
    celery_environment,
    celery_workers,
    database_result_backend,
    forget_broker_keys,
    service_environment,
    tail,
    wait_for,
)
from devtools.seed import seed_event_logs
from retention.db.connection import connect_dsn
from retention.db.migrate import migrate
from retention.policy import parse_policy
from retention.rows.planner import measured_rows_per_second
from retention.rows.sizing import DEFAULT_ROWS_PER_SECOND

POLICY = "bench_scale"
DAG_ID = f"retention__{POLICY}"
DAG_TABLE = "bench_scale_dag"
PLAIN_TABLE = "bench_scale_plain"
POOL = "retention_db"  # the pool airflow_settings.yaml declares with 2 slots
SLOTS = 2
RETAIN_DAYS = 30
DAYS = 60
PARSE_SECONDS = 300
MIGRATE_SECONDS = 900
WARMUP_ROWS = 1_000


# --- the bench's own Airflow: metadata database, home, environment, processes ---------------


def bench_metadata_url(dsn: str) -> str:
    """The bench's metadata database (local metadata name + ``_bench``), created if missing.

    Falls back to the local metadata database, with a warning, when this user
    may not create databases.
    """
    from sqlalchemy.engine import make_url

    local = make_url(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    name = f"{local.database}_bench"
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except psycopg.errors.InsufficientPrivilege:
                print(
                    f"warning: may not create database {name}; using the local metadata "
                    f"database {local.database}: do not run `make airflow` meanwhile"
                )
                return local.render_as_string(hide_password=False)
    return local.set(database=name).render_as_string(hide_password=False)


def policy_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "description": "make bench-scale: the older half of a seeded event log.",
        "schedule": None,
        "start_date": "2026-01-01",
        "retain_days": RETAIN_DAYS,
        "postgres_conn_id": "retention_target",
        "table": f"public.{DAG_TABLE}",
        "key_column": "id",
        "timestamp_column": "created_at",
        "tenant_column": "tenant_id",
        "batch_rows": args.batch_rows,
        "pool": POOL,
    }
    if args.target_window_seconds is not None:
        fields["target_window_seconds"] = args.target_window_seconds
    policy, problems = parse_policy(POLICY, fields)
    if policy is None:
        raise SystemExit(f"bench policy invalid: {problems}")
    return fields


def prepare_airflow(args: argparse.Namespace, home: Path, dsn: str) -> dict[str, str]:
    """Point this process at the bench's Airflow (before anything imports airflow); returns
    the environment of the Airflow processes."""
    policies = home / "retention_policies.yaml"
    policies.write_text(yaml.safe_dump({"policies": {POLICY: policy_fields(args)}}))
    settings = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": bench_metadata_url(dsn),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "task-logs"),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "RETENTION_POLICIES": str(policies),
    }
    if args.executor == "celery":
        broker = celery_broker_url()
        if problem := broker_unreachable(broker):
            raise SystemExit(f"--executor celery: {problem}")
        backend = database_result_backend(settings["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        settings.update(celery_environment(broker, backend))
    os.environ.update(settings)
    env = service_environment()
    # this process only triggers and reads: keep Airflow's info lines out of the report
    os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "WARNING"
    return env


def waiting(check: Callable[[], bool], seconds: float, what: str, logs: Path) -> None:
    """``wait_for`` (polling each second), failing with the services' logs as they are then."""
    try:
        wait_for(check, seconds, what, step=1)
    except TimeoutError as late:
        raise SystemExit(f"{late}\n{tail(logs)}") from late


def migrate_metadata(env: dict[str, str], logs: Path) -> float:
    began = time.perf_counter()
    with (logs / "db-migrate.log").open("wb") as log:
        done = subprocess.run(
            [AIRFLOW, "db", "migrate"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=MIGRATE_SECONDS,
            check=False,
        )
    if done.returncode:
        raise SystemExit(f"airflow db migrate failed\n{tail(logs)}")
    return time.perf_counter() - began


def start_services(
    stack: ExitStack, args: argparse.Namespace, env: dict[str, str], logs: Path
) -> None:
    """api-server, dag-processor, scheduler (and Celery workers), stopped when ``stack`` closes."""
    if args.executor == "celery":
        # The stack unwinds last-in first-out: the broker's keys go after every process stopped.
        stack.callback(forget_broker_keys, env)
    fail_unfinished_runs()  # before a scheduler could start one
    url = stack.enter_context(api_server(env, logs, apps="execution"))
    env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"{url}/execution/"
    started = dt.datetime.now(dt.UTC)
    stack.enter_context(airflow_process("dag-processor", ["dag-processor"], env, logs))
    stack.enter_context(airflow_process("scheduler", ["scheduler"], env, logs))
    if args.executor == "celery":
        stack.enter_context(celery_workers(env, logs))

    from airflow.models.dag import DagModel
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session

    # deprecation notices of Airflow's dependencies, not ours (after Airflow's own filters)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=r".* is deprecated")
    Pool.create_or_update_pool(
        POOL, slots=SLOTS, description="make bench-scale", include_deferred=False
    )

    def parsed() -> bool:  # parsed by this dag-processor, from this run's policies file
        with create_session() as session:
            model = session.get(DagModel, DAG_ID)
            return bool(model and model.last_parsed_time and model.last_parsed_time > started)

    waiting(parsed, PARSE_SECONDS, f"{DAG_ID} being parsed", logs)
    with create_session() as session:
        session.get(DagModel, DAG_ID).is_paused = False  # type: ignore[union-attr]


def fail_unfinished_runs() -> None:
    """Mark runs an interrupted bench left queued or running failed (they would hold run slots)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    with create_session() as session:
        stale = (
            session.query(DagRun)
            .filter(DagRun.dag_id == DAG_ID, DagRun.state.in_(("queued", "running")))
            .all()
        )
        for run in stale:
            print(f"marking the unfinished run {run.run_id} of an earlier bench failed")
            run.state = DagRunState.FAILED


# --- the tables ------------------------------------------------------------------------------


def seed_pair(dsn: str, rows: int, end: dt.datetime) -> int:
    """Two identical tables; returns the rows older than the cutoff (half of them)."""
    seed_identical_tables(
        dsn, (DAG_TABLE, PLAIN_TABLE), rows=rows, end=end, days=DAYS, autovacuum=False
    )
    with connect_dsn(dsn) as conn:
        return count_older(conn, PLAIN_TABLE, cutoff_of(end))


def cutoff_of(end: dt.datetime) -> dt.datetime:
    return end - dt.timedelta(days=RETAIN_DAYS)


def count_all(conn: Any, table: str) -> int:
    row = conn.execute(
        sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier("public", table))
    ).fetchone()
    return int(row["n"])


def drop_tables(dsn: str) -> None:
    with connect_dsn(dsn) as conn:
        conn.execute(
            sql.SQL("DROP TABLE IF EXISTS {}, {}").format(
                sql.Identifier("public", DAG_TABLE), sql.Identifier("public", PLAIN_TABLE)
            )
        )


# --- the two deletions -----------------------------------------------------------------------


def single_delete(dsn: str, cutoff: dt.datetime) -> dict[str, float]:
    with connect_dsn(dsn) as conn:
        conn.execute("CHECKPOINT")
        began = time.perf_counter()
        with conn.transaction():
            deleted = conn.execute(
                sql.SQL("DELETE FROM {} WHERE created_at < %s").format(
                    sql.Identifier("public", PLAIN_TABLE)
                ),
                (cutoff,),
            ).rowcount
        return {"deleted": deleted, "seconds": time.perf_counter() - began}


def dag_run(dsn: str, args: argparse.Namespace, end: dt.datetime, logs: Path) -> dict[str, Any]:
    """Trigger one run anchored at ``end`` and wait for it; returns what Airflow recorded."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType

    with connect_dsn(dsn) as conn:
        conn.execute("CHECKPOINT")
    run_id = f"bench_scale__{end:%Y%m%dT%H%M%S}"
    conf = {"window_rows": args.window_rows} if args.window_rows else {}
    with create_session() as session:
        trigger_dag(
            DAG_ID,
            triggered_by=DagRunTriggeredByType.TEST,
            run_id=run_id,
            logical_date=end,
            run_after=end,  # a manual run's data interval is inferred from run_after
            conf=conf,
            session=session,
        )

    def state() -> str | None:
        with create_session() as session:
            return session.query(DagRun.state).filter_by(dag_id=DAG_ID, run_id=run_id).scalar()

    waiting(lambda: state() in ("success", "failed"), args.timeout, f"run {run_id} finishing", logs)
    with create_session() as session:
        run = session.query(DagRun).filter_by(dag_id=DAG_ID, run_id=run_id).one()
        tis = session.query(TaskInstance).filter_by(dag_id=DAG_ID, run_id=run_id).all()
        tasks = sorted(
            (
                {
                    "task": ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]",
                    "task_id": ti.task_id,
                    "state": ti.state,
                    "try_number": ti.try_number,
                    "scheduled": ti.scheduled_dttm,
                    "queued": ti.queued_dttm,
                    "start": ti.start_date,
                    "end": ti.end_date,
                }
                for ti in tis
            ),
            key=lambda t: (t["start"] or end, t["task"]),
        )
        recorded = {
            "run_id": run_id,
            "state": run.state,
            "queued_at": run.queued_at,
            "start": run.start_date,
            "end": run.end_date,
            "tasks": tasks,
        }
    if recorded["state"] != "success":
        states = ", ".join(f"{t['task']}: {t['state']}" for t in tasks)
        raise SystemExit(f"run {run_id} ended {recorded['state']} ({states})\n{tail(logs)}")
    return recorded


def ledger(dsn: str, run_id: str) -> dict[str, Any]:
    """The run's row of retention.runs and its windows (in window order)."""
    with connect_dsn(dsn) as conn:
        run = conn.execute(
            "SELECT plan_id, cutoff, status, windows, window_rows, rows_planned, rows_deleted, "
            "plan_seconds, delete_seconds, reconcile_seconds, longest_batch_ms "
            "FROM retention.runs WHERE policy = %s AND run_id = %s",
            (POLICY, run_id),
        ).fetchone()
        if run is None:
            raise SystemExit(f"no row of retention.runs for run {run_id}")
        windows = conn.execute(
            "SELECT window_no, expected_rows, rows_deleted, batches, attempts, seconds, "
            "paused_seconds, longest_batch_ms, started_at, finished_at "
            "FROM retention.windows WHERE policy = %s AND plan_id = %s ORDER BY window_no",
            (POLICY, run["plan_id"]),
        ).fetchall()
    return {"run": run, "windows": windows}


# --- figures ---------------------------------------------------------------------------------


def critical_path(durations: list[float], slots: int) -> float:
    """Makespan of ``durations`` list-scheduled in order on ``slots`` (each to the first free)."""
    loads = [0.0] * slots
    for seconds in durations:
        loads[loads.index(min(loads))] += seconds
    return max(loads)


def secs(later: dt.datetime, earlier: dt.datetime) -> float:
    return (later - earlier).total_seconds()


def timeline(airflow: dict[str, Any]) -> list[tuple[str, float]]:
    """Consecutive stretches of the DAG run between task instances' dates (they sum to wall)."""
    tasks = airflow["tasks"]
    plan = next(t for t in tasks if t["task_id"] == "plan_windows")
    deletes = [t for t in tasks if t["task_id"] == "delete_window"]
    reconcile = next(t for t in tasks if t["task_id"] == "reconcile")
    first_delete = min(t["start"] for t in deletes)
    last_delete = max(t["end"] for t in deletes)
    return [
        ("run start → plan_windows start", secs(plan["start"], airflow["start"])),
        ("plan_windows task", secs(plan["end"], plan["start"])),
        ("→ first delete_window start", secs(first_delete, plan["end"])),
        ("delete_window tasks (first start → last end)", secs(last_delete, first_delete)),
        ("→ reconcile start", secs(reconcile["start"], last_delete)),
        ("reconcile task", secs(reconcile["end"], reconcile["start"])),
        ("→ run end", secs(airflow["end"], reconcile["end"])),
    ]


def figures_of(airflow: dict[str, Any], books: dict[str, Any], plain: dict[str, float]) -> dict:
    run, windows = books["run"], books["windows"]
    wall = secs(airflow["end"], airflow["start"])
    plan_task = next(t for t in airflow["tasks"] if t["task_id"] == "plan_windows")
    deletes = [t for t in airflow["tasks"] if t["task_id"] == "delete_window"]
    work = [float(w["seconds"]) for w in windows]
    path = critical_path(work, SLOTS)
    plan_s = float(run["plan_seconds"])
    return {
        "windows": len(windows),
        "window_rows": int(run["window_rows"]),
        "rows_deleted": int(run["rows_deleted"]),
        "wall_s": wall,
        "queued_to_start_s": secs(airflow["start"], airflow["queued_at"]),
        "plan_s": plan_s,
        "plan_task_s": secs(plan_task["end"], plan_task["start"]),
        "delete_work_s": sum(work),
        "delete_tasks_s": sum(secs(t["end"], t["start"]) for t in deletes),
        "critical_path_s": path,
        "windows_span_s": secs(
            max(w["finished_at"] for w in windows), min(w["started_at"] for w in windows)
        ),
        "paused_s": sum(float(w["paused_seconds"]) for w in windows),
        "reconcile_s": float(run["reconcile_seconds"] or 0.0),
        "overhead_s": wall - plan_s - path,
        "plain_s": plain["seconds"],
        "ratio": wall / plain["seconds"],
        "work_ratio": (plan_s + path) / plain["seconds"],
        "plan_share": plan_s / wall,
        "plan_task_share": secs(plan_task["end"], plan_task["start"]) / wall,
        "longest_batch_ms": float(run["longest_batch_ms"] or 0.0),
        "plain_ms": plain["seconds"] * 1000,
        "retries": sum(max(0, t["try_number"] - 1) for t in airflow["tasks"]),
        "timeline": timeline(airflow),
        "tasks": airflow["tasks"],
        "window_ledger": windows,
    }


def print_round(number: int, f: dict[str, Any], executor: str) -> None:
    wall = f["wall_s"]
    print(
        f"\n== round {number + 1}: DAG run timeline ({executor} executor; Airflow's metadata, "
        "the work inside from the ledger)"
    )
    notes = {
        "plan_windows task": f"of which planning {f['plan_s']:.2f} s (retention.runs)",
        "delete_window tasks (first start → last end)": (
            f"of which windows' work on {SLOTS} slots {f['critical_path_s']:.2f} s "
            f"(critical path; first window start → last window end {f['windows_span_s']:.2f} s)"
        ),
        "reconcile task": f"of which counting {f['reconcile_s']:.2f} s (retention.runs)",
    }
    for label, seconds in f["timeline"]:
        print(f"  {label:<46} {seconds:8.2f} s  {notes.get(label, '')}")
    print(
        f"  {'DAG run wall time (start → end)':<46} {wall:8.2f} s  "
        f"(queued → start {f['queued_to_start_s']:.2f} s)"
    )
    print(
        "  windows (ledger): "
        + ", ".join(
            f"#{w['window_no']} {w['rows_deleted']:,} rows {float(w['seconds']):.2f} s"
            + (f" ({w['attempts']} attempts)" if w["attempts"] > 1 else "")
            for w in f["window_ledger"]
        )
    )
    print(
        "  task instances (queued → start, start → end): "
        + ", ".join(
            f"{t['task']} {secs(t['start'], t['queued']) if t['queued'] else 0:.1f}/"
            f"{secs(t['end'], t['start']):.1f}"
            for t in f["tasks"]
        )
    )


def print_summary(rounds: list[dict[str, Any]]) -> None:
    def line(label: str, key: str, unit: str = " s", digits: int = 2, scale: float = 1) -> None:
        print(show(label, [r[key] * scale for r in rounds], unit, digits))

    print(
        f"\n== figures ({len(rounds)} round(s); windows per round "
        f"{[r['windows'] for r in rounds]}, window_rows {[r['window_rows'] for r in rounds]})"
    )
    line("planning (retention.runs.plan_seconds)", "plan_s")
    line("plan_windows task instance", "plan_task_s")
    line("planning ÷ DAG run wall time", "plan_share", " %", 2, 100)
    line("plan_windows task ÷ DAG run wall time", "plan_task_share", " %", 2, 100)
    line("summed delete work (retention.windows.seconds)", "delete_work_s")
    line("summed delete_window task durations", "delete_tasks_s")
    line(f"windows' critical path on {SLOTS} slots", "critical_path_s")
    line("DAG run wall time (start → end)", "wall_s")
    line("DAG run queued → start", "queued_to_start_s")
    line("Airflow overhead = wall − planning − critical path", "overhead_s")
    line("  of which reconcile's count", "reconcile_s")
    line("single DELETE (BEGIN → COMMIT)", "plain_s")
    line("total ratio = DAG run wall ÷ single DELETE", "ratio", "×")
    line("work alone = (planning + critical path) ÷ single DELETE", "work_ratio", "×")
    line("longest deleter transaction", "longest_batch_ms", " ms", 0)
    line("single DELETE transaction", "plain_ms", " ms", 0)
    if any(r["paused_s"] for r in rounds):
        line("windows paused by the health gate", "paused_s")
    if any(r["retries"] for r in rounds):
        print(f"task retries per round: {[r['retries'] for r in rounds]} (figures include them)")
    share = spread([r["plan_share"] for r in rounds])["median"]
    ratio = spread([r["ratio"] for r in rounds])["median"]
    print(
        "targets (issue 10), on the medians: planning under 5% of the DAG run "
        f"({share:.1%}: {'met' if share < 0.05 else 'not met'}); DAG run under 1.5× the single "
        f"DELETE ({ratio:.2f}×: {'met' if ratio < 1.5 else 'not met'})"
    )


# --- main ------------------------------------------------------------------------------------


def measure(
    dsn: str, args: argparse.Namespace, end: dt.datetime, logs: Path, number: int
) -> dict[str, Any]:
    """One round: seed both tables, both deletions (alternating), check, read the figures."""
    cutoff = cutoff_of(end)
    began = time.perf_counter()
    eligible = seed_pair(dsn, args.rows, end)
    print(
        f"round {number + 1}: seeded 2 × {args.rows:,} rows in {time.perf_counter() - began:.0f} s;"
        f" {eligible:,} older than the cutoff {cutoff.isoformat()}"
    )
    if args.history == "clear":
        forget_policy_history(dsn, POLICY)
    with connect_dsn(dsn) as conn:
        rate = measured_rows_per_second(conn, POLICY)
    if args.window_rows:
        sizing = f"window_rows {args.window_rows:,} (trigger param)"
    elif rate:
        sizing = f"by time, at {rate:,.0f} rows/s measured by the policy's earlier windows"
    else:
        sizing = f"by time, at the planner's default rate ({DEFAULT_ROWS_PER_SECOND:,.0f} rows/s)"
    print(f"  window sizing: {sizing}")
    outcome: dict[str, Any] = {}
    if number % 2 == 0:  # the DAG first in even rounds
        outcome["airflow"] = dag_run(dsn, args, end, logs)
        outcome["plain"] = single_delete(dsn, cutoff)
    else:
        outcome["plain"] = single_delete(dsn, cutoff)
        outcome["airflow"] = dag_run(dsn, args, end, logs)
    books = ledger(dsn, outcome["airflow"]["run_id"])
    with connect_dsn(dsn) as conn:
        left = {t: count_older(conn, t, cutoff) for t in (DAG_TABLE, PLAIN_TABLE)}
        kept = {t: count_all(conn, t) for t in (DAG_TABLE, PLAIN_TABLE)}
    checks = {
        "cutoff": books["run"]["cutoff"] == cutoff,
        "status clean": books["run"]["status"] == "clean",
        "no old rows left": not any(left.values()),
        "same rows kept": kept[DAG_TABLE] == kept[PLAIN_TABLE] == args.rows - eligible,
        "same rows deleted": books["run"]["rows_deleted"]
        == outcome["plain"]["deleted"]
        == eligible,
    }
    if not all(checks.values()):
        raise SystemExit(f"check failed: {checks}; {left=} {kept=} ledger={books['run']}")
    print(f"  checked: {', '.join(checks)} ({kept[DAG_TABLE]:,} rows kept in each)")
    figures = figures_of(outcome["airflow"], books, outcome["plain"])
    figures.update(eligible=eligible, cutoff=cutoff, dag_first=number % 2 == 0)
    return figures


def warm_up(dsn: str, args: argparse.Namespace, end: dt.datetime, logs: Path) -> float:
    """One run of the DAG on a tiny table, so that the measured runs find the executor warm
    (the first task after a scheduler starts is slow); returns its wall time. Its windows
    hold under 1,000 rows, which window sizing never reads."""
    with connect_dsn(dsn) as conn:
        migrate(conn)
        seed_event_logs(conn, table=f"public.{DAG_TABLE}", rows=WARMUP_ROWS, end=end, days=DAYS)
    recorded = dag_run(dsn, args, end, logs)
    return secs(recorded["end"], recorded["start"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows in each table")
    parser.add_argument("--executor", choices=("local", "celery"), default="local")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds, alternating the order (each re-seeds)"
    )
    parser.add_argument(
        "--history",
        choices=("keep", "clear"),
        default="keep",
        help="keep: size windows from the bench policy's earlier windows, as a policy in "
        "production does after its first run; clear: forget them (first-run sizing)",
    )
    parser.add_argument(
        "--target-window-seconds", type=float, default=None, help="default: the policy default"
    )
    parser.add_argument(
        "--window-rows", type=int, default=None, help="trigger param (default: sized by time)"
    )
    parser.add_argument("--batch-rows", type=int, default=5_000, help="first batch of a window")
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds to wait for each DAG run"
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="measure the first run after the scheduler starts (cold executor workers)",
    )
    parser.add_argument("--keep-tables", action="store_true", help="leave the two tables")
    parser.add_argument(
        "--keep-home", action="store_true", help="keep the temporary Airflow home and its logs"
    )
    args = parser.parse_args()
    dsn = os.environ["RETENTION_DEMO_DSN"]
    home = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    logs = home / "services"
    logs.mkdir()
    print(
        f"rows={args.rows:,} executor={args.executor} pool={POOL}×{SLOTS} repeat={args.repeat} "
        f"history={args.history} batch_rows={args.batch_rows:,} "
        f"target_window_seconds={args.target_window_seconds or 'policy default'}"
    )
    rounds: list[dict[str, Any]] = []
    warmup: float | None = None
    finished = False
    try:
        env = prepare_airflow(args, home, dsn)
        print(f"airflow db migrate: {migrate_metadata(env, logs):.0f} s")
        with ExitStack() as stack:
            began = time.perf_counter()
            start_services(stack, args, env, logs)
            print(
                f"Airflow processes up and {DAG_ID} parsed in {time.perf_counter() - began:.0f} s"
            )
            ends: list[dt.datetime] = []

            def next_end() -> dt.datetime:  # each run's logical date, distinct to the second
                end = dt.datetime.now(dt.UTC).replace(microsecond=0)
                ends.append(max(end, ends[-1] + dt.timedelta(seconds=1)) if ends else end)
                return ends[-1]

            if not args.no_warmup:
                warmup = warm_up(dsn, args, next_end(), logs)
                print(f"warm-up run ({WARMUP_ROWS:,} rows, not measured): wall time {warmup:.2f} s")
            for number in range(args.repeat):
                rounds.append(measure(dsn, args, next_end(), logs, number))
                print_round(number, rounds[-1], args.executor)
        finished = True
    finally:
        if not args.keep_tables:
            drop_tables(dsn)
        if finished and not args.keep_home:
            shutil.rmtree(home, ignore_errors=True)
        else:
            print(f"the Airflow home and its logs are kept in {home}", file=sys.stderr)
    print_summary(rounds)
    record(
        "bench_scale",
        vars(args),
        {
            "rounds": rounds,
            "ratio": spread([r["ratio"] for r in rounds]),
            "plan_share": spread([r["plan_share"] for r in rounds]),
            "overhead_s": spread([r["overhead_s"] for r in rounds]),
            "warmup_wall_s": warmup,
        },
    )


if __name__ == "__main__":
    main()
