"""`make demo`: seed a 1M-row event log, run retention__event_logs once, print the summary.

The run goes through `airflow dags test` for a fixed logical date (today,
midnight UTC), exactly as an operator would test a DAG, and the summary is
read back from retention.runs.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from seed import seed_event_logs

from retention.db import connect_dsn

ROWS = 1_000_000
LOG = Path(".local/demo-dags-test.log")


def main() -> None:
    dsn = os.environ["RETENTION_DEMO_DSN"]
    logical_date = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with connect_dsn(dsn) as conn:
        began = time.perf_counter()
        seed_event_logs(conn, rows=ROWS, end=logical_date, days=90, tenants=20)
        print(
            f"seeded public.event_logs: {ROWS:,} rows over 90 days, 20 tenants "
            f"({time.perf_counter() - began:.1f}s)"
        )
    print(f"running: airflow dags test retention__event_logs {logical_date.isoformat()}")
    began = time.perf_counter()
    with LOG.open("w") as log:
        done = subprocess.run(
            ["airflow", "dags", "test", "retention__event_logs", logical_date.isoformat()],
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    print(f"dags test finished in {time.perf_counter() - began:.1f}s (log: {LOG})")
    with connect_dsn(dsn) as conn:
        row = conn.execute(
            "SELECT summary FROM retention.runs WHERE policy = 'event_logs' "
            "AND logical_date = %s ORDER BY planned_at DESC LIMIT 1",
            (logical_date,),
        ).fetchone()
    if done.returncode != 0 or row is None or row["summary"] is None:
        print(LOG.read_text()[-4000:])
        sys.exit(f"demo: the DAG run failed (exit {done.returncode}); see {LOG}")
    summary = row["summary"]
    print("reconciliation summary (retention.runs):")
    print(json.dumps(summary, indent=2))
    print(
        f"\n{summary['rows_deleted']:,} rows deleted in {summary['windows']} windows, "
        f"{summary['rows_remaining']} remaining older than {summary['cutoff']}: "
        f"{summary['status']}"
    )


if __name__ == "__main__":
    main()
