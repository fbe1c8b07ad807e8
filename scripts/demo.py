"""`make demo`: run both shipped policies once against local data and print the summaries.

1. ``retention__event_logs``: a 1M-row event log (90 days, 20 tenants) loses
   everything older than 30 days, in short batched transactions.
2. ``retention__media_assets``: 400 media rows (28 days) whose objects, and each
   object's thumbnails (a derivative: its own operation), live in
   the sandbox deletion API on loopback; everything older than 14 days is
   deleted remotely (rate-limited, idempotent, through the operation ledger),
   then locally, and each deletion is announced by a signed ``retention.deleted``
   event to a local receiver that verifies it.
3. An urgent erasure of one media tenant (``retention__erasure-requests``): every
   row and object of the tenant, young ones too, ahead of any routine backlog,
   ending with a signed ``retention.erased`` receipt.

A legal hold keeps one event-log tenant through run 1 (lifted again at the end).

Each run goes through ``airflow dags test`` for a fixed logical date (today,
midnight UTC), as an operator would test a DAG; the summaries are read back
from ``retention.runs`` and the sandbox's own counters. The terminal gets a few
lines per run; the full summaries go to ``.local/demo-summaries.json``, and the
demo ends with what to try next (the UI, more data, the sandbox's faults).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from demo_data import forget_media_operations

from devtools.receiver import Receiver
from devtools.sandbox_api import SandboxServer
from devtools.seed import seed_event_logs, seed_media_assets
from retention.db.connection import connect_dsn
from retention.db.migrate import migrate
from retention.erasures.request import ERASURE_DAG_ID, get_erasure, request_erasure, validate
from retention.holds.store import lift_hold, place_hold
from retention.policy import load_policies
from retention.summary import RunSummary

LOCAL = Path(".local")
SUMMARIES = LOCAL / "demo-summaries.json"


DEMO_HELD_TENANT = "7"  # the demo's legal hold keeps this tenant's old event logs
DEMO_ERASED_TENANT = "3"  # the demo's urgent erasure deletes this media tenant, young rows too


def dags_test(dag_id: str, logical_date: dt.datetime) -> tuple[int, Path]:
    """``airflow dags test`` one DAG for one logical date; its exit code and its log."""
    log_path = LOCAL / f"demo-{dag_id}.log"
    print(f"\nrunning: airflow dags test {dag_id} {logical_date.isoformat()}")
    began = time.perf_counter()
    with log_path.open("w") as log:
        done = subprocess.run(
            ["airflow", "dags", "test", dag_id, logical_date.isoformat()],
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    print(f"finished in {time.perf_counter() - began:.1f}s (log: {log_path})")
    return done.returncode, log_path


def run_dag(dag_id: str, logical_date: dt.datetime) -> RunSummary:
    """Run one policy's DAG for ``logical_date``; its summary as ``retention.runs`` holds
    it, read typed."""
    returncode, log_path = dags_test(dag_id, logical_date)
    policy = dag_id.removeprefix("retention__")
    with connect_dsn(os.environ["RETENTION_DEMO_DSN"]) as conn:
        row = conn.execute(
            "SELECT summary FROM retention.runs WHERE policy = %s AND logical_date = %s "
            "ORDER BY planned_at DESC LIMIT 1",
            (policy, logical_date),
        ).fetchone()
    summary = RunSummary.from_stored(row["summary"]) if row is not None else None
    if returncode != 0 or summary is None:
        print(log_path.read_text()[-4000:])
        sys.exit(f"demo: {dag_id} failed (exit {returncode}); see {log_path}")
    return summary


def run_erasure(
    dsn: str, policy: str = "media_assets", tenant: str = DEMO_ERASED_TENANT
) -> dict[str, Any]:
    """Request the urgent erasure of one tenant (its young rows too: an erasure ignores
    retain_days) and run the erasure DAG once, as its every-minute schedule would;
    returns the erasure as recorded, with its receipt's event id (None without one)."""
    policies = {known.name: known for known in load_policies().policies}
    asked = validate(
        policies,
        policy=policy,
        scope="tenant",
        value=tenant,
        reason="demo: a data subject's erasure request (ticket 4711)",
        requested_by="make demo",
        request_key=f"demo-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S.%f}",  # one per demo
    )
    with connect_dsn(dsn) as conn:
        erasure, _ = request_erasure(conn, asked)
        print(
            f"\nrequested erasure {erasure['erasure_id']}: {policy} tenant {tenant}, "
            f"whatever its rows' age, due {erasure['deadline']:%Y-%m-%d}"
        )
    now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    returncode, log_path = dags_test(ERASURE_DAG_ID, now)
    with connect_dsn(dsn) as conn:
        done = get_erasure(conn, erasure["erasure_id"])
        receipt = conn.execute(
            "SELECT event_id FROM retention.outbox WHERE operation_key = %s "
            "AND event_type = 'retention.erased'",
            (f"erasure:{erasure['erasure_id']}",),
        ).fetchone()
    if returncode != 0 or done is None or done["state"] != "done":
        print(log_path.read_text()[-4000:])
        sys.exit(f"demo: the erasure DAG failed (exit {returncode}); see {log_path}")
    return {**done, "receipt_event_id": receipt["event_id"] if receipt else None}


def resource_states(conn, policy: str) -> str:
    """``object: 200 done; thumbnails: 199 done, 1 pending``: each remote resource's
    operations of the policy by state, as the ledger holds them."""
    rows = conn.execute(
        "SELECT resource, state, count(*) AS n FROM retention.operations WHERE policy = %s "
        "GROUP BY resource, state ORDER BY resource <> 'object', resource, state",
        (policy,),
    ).fetchall()
    states: dict[str, list[str]] = {}
    for row in rows:
        states.setdefault(row["resource"], []).append(f"{row['n']:,} {row['state']}")
    return "; ".join(f"{name}: {', '.join(parts)}" for name, parts in states.items()) or "none"


def reset_media_ledger(conn) -> None:
    """Forget earlier demos' media operations (see ``demo_data.forget_media_operations``)."""
    forget_media_operations(conn)
    # An earlier demo stopped with Ctrl-C leaves its `airflow dags test` run "running" in
    # Airflow's database and holding the run lease; the demo's own runs would wait for it.
    conn.execute("DELETE FROM retention.run_leases WHERE policy IN ('event_logs', 'media_assets')")


def save_summaries(summaries: dict[str, Any], path: Path = SUMMARIES) -> Path:
    """Write the runs' full summaries (about 140 lines of JSON) to ``path``: the terminal
    gets the few lines that say what happened, and where the rest is."""
    path.write_text(json.dumps(summaries, indent=2, sort_keys=True, default=str) + "\n")
    return path


def by_table(summary: RunSummary) -> str:
    """``public.media_assets 200, public.media_renditions 400``: the summary's rows by table,
    with its orphans when a child without a foreign key constraint has any."""
    counted = summary.rows_deleted_by_table or {}
    text = ", ".join(f"{table} {rows:,}" for table, rows in counted.items()) or "none"
    orphans = summary.orphans or {}
    if orphans:
        text += "; orphans: " + ", ".join(f"{table} {rows:,}" for table, rows in orphans.items())
    return text


def what_next() -> str:
    """Where a first hour goes on from here: the UI, more data, and the sandbox's faults."""
    return """
what next:
  make airflow                            # the UI (:8080) with the sandbox API and the receiver;
                                          # the demo DAGs are unpaused there
  make demo-data                          # rows to delete again (ARGS="--rows 50000"), then
                                          # trigger both DAGs in the UI
  make sandbox ARGS="reject --oldest 5"   # 422 for the 5 oldest objects: dead letters, then a
                                          # replay (retention__replay, failure_class http_422)
  make sandbox ARGS="storm 120"           # every delete answers 429 for 120 s
  make sandbox ARGS="latency 500"         # every delete answers after 500 ms
  make sandbox ARGS="clear"               # no faults; ARGS="stats" shows what it answered"""


def main() -> None:
    dsn = os.environ["RETENTION_DEMO_DSN"]
    logical_date = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with connect_dsn(dsn) as conn:
        began = time.perf_counter()
        seed_event_logs(conn, rows=1_000_000, end=logical_date, days=90, tenants=20)
        seed_media_assets(conn, rows=400, end=logical_date, days=28, tenants=5)
        reset_media_ledger(conn)
        print(
            "seeded public.event_logs (1,000,000 rows, 90 days, 20 tenants) and "
            "public.media_assets (400 rows, 28 days) with 800 rows in its child table "
            f"public.media_renditions in {time.perf_counter() - began:.1f}s"
        )
        migrate(conn)
        hold = place_hold(
            conn,
            policy="event_logs",
            match="tenant",
            value=DEMO_HELD_TENANT,
            reason="demo: legal hold on one tenant (case 991)",
            placed_by="make demo",
        )
        print(f"placed {hold.described}")

    try:
        rows = run_dag("retention__event_logs", logical_date)
    finally:
        with connect_dsn(dsn) as conn:  # the next demo starts without it
            lift_hold(conn, hold.hold_id, reason="demo finished", lifted_by="make demo")
    print(
        f"event_logs: {rows.rows_deleted or 0:,} rows deleted in {rows.windows} windows, "
        f"{rows.rows_remaining} remaining older than {rows.cutoff}: {rows.status}; "
        f"{rows.rows_held:,} rows of tenant {DEMO_HELD_TENANT} kept by hold "
        f"{hold.hold_id} (lifted again: the next run deletes them)"
    )

    port = int(os.environ.get("RETENTION_SANDBOX_PORT", "8765"))
    sandbox = SandboxServer(port, rate=30, burst=30).start()
    print(f"\nsandbox deletion API on {sandbox.url} (real limit 30/s; policy ceiling 20/s)")
    events_port = int(os.environ.get("RETENTION_EVENTS_PORT", "8766"))
    secret = json.loads(os.environ["AIRFLOW_CONN_MEDIA_EVENTS"])["password"]
    receiver = Receiver(secret, port=events_port).start()
    print(f"event receiver on 127.0.0.1:{events_port}, verifying Standard Webhooks signatures")
    try:
        media = run_dag("retention__media_assets", logical_date)
        erased = run_erasure(dsn)
    finally:
        stats = sandbox.state.stats()
        sandbox.stop()
        receiver.stop()
    saved = save_summaries(
        {"event_logs": rows.to_json(), "media_assets": media.to_json(), "erasure": erased}
    )
    with connect_dsn(os.environ["RETENTION_DEMO_DSN"]) as conn:
        by_resource = resource_states(conn, "media_assets")
    effects = stats["effects"]
    events = media.events
    duplicates = sum(effects.values()) - len(effects)
    print(
        f"media_assets: {media.rows_deleted or 0:,} objects and rows deleted, "
        f"{media.rows_remaining} remaining older than {media.cutoff}: {media.status}\n"
        f"media_assets resources (the ledger): {by_resource}\n"
        f"media_assets rows deleted by table (children with their asset, same transaction): "
        f"{by_table(media)}\n"
        f"sandbox API: {len(stats['requests'])} requests, {len(effects)} objects and "
        "thumbnails deleted, "
        f"{duplicates} duplicate remote effects, {stats['repeats']} idempotent repeats, "
        f"{stats['throttled']} answered 429\n"
        f"event receiver: {receiver.summary()}\n"
        f"events in the run summary (counted after deliver_events ended): "
        f"{events.delivered_this_run if events else 0} delivered this run, "
        f"{events.pending_after_delivery if events else 0} pending"
        + (f" ({events.pending_why})" if events and events.pending_why else "")
    )
    print(
        f"erasure {erased['erasure_id']} (media_assets tenant {DEMO_ERASED_TENANT}): "
        f"{erased['state']}; rows deleted by table: "
        + (", ".join(f"{t} {n:,}" for t, n in erased["rows_deleted"].items()) or "none")
        + f"; {len(erased['objects'])} objects deleted remotely; receipt: retention.erased "
        f"event {erased['receipt_event_id'] or '(none)'}\n"
        f"the runs' and the erasure's full summaries (JSON): {saved}"
    )
    print(what_next())


if __name__ == "__main__":
    main()
