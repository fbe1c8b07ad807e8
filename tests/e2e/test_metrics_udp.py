"""Metrics end to end: `airflow dags test` with StatsD on, received over real UDP.

Each test binds a UDP socket on loopback, runs a whole policy DAG as the
operator would (a subprocess of the ``airflow`` CLI with ``RETENTION_POLICIES``
and ``AIRFLOW_CONN_*`` in its environment, StatsD pointed at the socket), and
checks the ``retention.*`` lines that arrived against the database.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.seed import seed_event_logs
from retention.db.connection import Connection
from tests.support.policies import policy_fields, remote_fields
from tests.support.statsd import PREFIX, StatsdReceiver, statsd_receiver
from tests.support.tables import create_media_table

pytestmark = pytest.mark.e2e

TODAY = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
LOGICAL_DATE = TODAY - dt.timedelta(days=1)
CUTOFF = LOGICAL_DATE - dt.timedelta(days=30)  # retain_days 30


@pytest.fixture
def statsd() -> Iterator[StatsdReceiver]:
    with statsd_receiver() as receiver:
        yield receiver


def airflow_dags_test(
    name: str, fields: dict[str, Any], tmp_path: Path, statsd: StatsdReceiver
) -> subprocess.CompletedProcess[str]:
    """``airflow dags test retention__<name>`` in a subprocess, StatsD on, towards ``statsd``."""
    policies = tmp_path / "policies.yaml"
    policies.write_text(yaml.safe_dump({"policies": {name: fields}}))
    env = {
        **os.environ,  # the test Airflow home and AIRFLOW_CONN_* (tests/support/fixtures.py)
        "RETENTION_POLICIES": str(policies),
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": PREFIX,
    }
    env.pop("RETENTION_METRICS_NAMES", None)  # both forms: the default
    airflow = Path(sys.executable).with_name("airflow")
    done = subprocess.run(
        [str(airflow), "dags", "test", f"retention__{name}", LOGICAL_DATE.isoformat()],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done


def run_row(db: Connection, name: str) -> dict[str, Any]:
    row = db.execute(
        "SELECT run_id, status, windows, rows_deleted, rows_remaining FROM retention.runs "
        "WHERE policy = %s",
        (name,),
    ).fetchone()
    assert row is not None, "the run recorded no summary"
    return row


def test_a_row_policy_run_sends_its_metrics_over_udp(
    db: Connection, unique_name: str, tmp_path: Path, statsd: StatsdReceiver
) -> None:
    seed_event_logs(db, table=f"public.{unique_name}", rows=3000, end=LOGICAL_DATE, days=60)
    eligible = db.execute(
        f"SELECT count(*) AS n FROM public.{unique_name} WHERE created_at < %s",  # noqa: S608
        (CUTOFF,),
    ).fetchone()["n"]
    assert eligible > 0
    fields = policy_fields(
        unique_name,
        window_rows=600,
        batch_rows=200,
        max_batch_rows=200,
        health={"sleep_ratio": 0.5},  # paced: throttled_seconds
    )

    done = airflow_dags_test(unique_name, fields, tmp_path, statsd)
    assert done.returncode == 0, done.stderr[-3000:]
    statsd.wait_for(f"retention.{unique_name}.oldest_eligible_age_seconds")

    run = run_row(db, unique_name)
    assert (run["status"], run["rows_deleted"], run["rows_remaining"]) == ("clean", eligible, 0)
    ledger = db.execute(
        "SELECT count(*) AS windows, sum(batches) AS batches, "
        "sum((pause_reasons->>'paced')::float8) AS paced FROM retention.windows "
        "WHERE policy = %s AND run_id = %s AND state = 'done'",
        (unique_name, run["run_id"]),
    ).fetchone()
    assert ledger["windows"] == run["windows"] > 1

    per_policy = f"retention.{unique_name}"
    assert sum(statsd.values(f"{per_policy}.rows_deleted", "c")) == eligible
    assert sum(statsd.values("retention.rows_deleted", "c")) == eligible, "tags dropped by StatsD"
    batches = statsd.values(f"{per_policy}.batch_ms.rows", "ms")
    assert len(batches) == ledger["batches"]
    assert all(0 < ms < 60_000 for ms in batches)
    windows = statsd.values(f"{per_policy}.window_seconds.done", "g")
    assert len(windows) == run["windows"]
    paced = statsd.values(f"{per_policy}.throttled_seconds.paced", "c")
    assert ledger["paced"] > 0
    assert sum(paced) == pytest.approx(
        ledger["paced"], abs=0.001 * (len(paced) + ledger["windows"])
    )
    assert statsd.last_gauge(f"{per_policy}.rows_remaining") == 0
    assert statsd.last_gauge(f"{per_policy}.oldest_eligible_age_seconds") == 0
    assert not any(".remote." in n or ".operations." in n for n in statsd.retention_names()), (
        "a row policy has no remote metrics"
    )


def test_a_remote_policy_run_sends_request_and_backlog_metrics(
    db: Connection, unique_name: str, tmp_path: Path, statsd: StatsdReceiver, sandbox: Any
) -> None:
    create_media_table(db, unique_name, 60, cutoff=CUTOFF, old_age=dt.timedelta(hours=1))
    # one object refused for good (dead), and an API slower than the policy allows (429s)
    sandbox.state.configure(reject=["obj-7"], rate=20, burst=5)
    remote = remote_fields(
        unique_name,
        endpoint="/v1/tenants/{tenant_id}/assets/{object_id}",
        rate_per_second=100,
        burst=10,
        max_attempts=3,
    )
    fields = policy_fields(
        unique_name, window_rows=30, batch_rows=30, window_per_tenant=False, remote=remote
    )

    done = airflow_dags_test(unique_name, fields, tmp_path, statsd)
    assert done.returncode == 0, done.stderr[-3000:]
    statsd.wait_for(f"retention.{unique_name}.dead_letters.operations")

    server = sandbox.state.stats()
    statuses: dict[int, int] = defaultdict(int)
    for request in server["requests"]:
        statuses[request["status"]] += 1
    per_policy = f"retention.{unique_name}"
    outcomes = {
        outcome: sum(statsd.values(f"{per_policy}.remote.requests.operations.{outcome}", "c"))
        for outcome in ("confirmed", "rate_limited", "rejected")
    }
    assert outcomes == {
        "confirmed": sum(n for status, n in statuses.items() if 200 <= status < 300),
        "rate_limited": statuses[429],
        "rejected": statuses[422],
    }
    assert statuses[429] > 0, "the storm answered 429 at least once"
    assert sum(statsd.values(f"{per_policy}.remote.rate_limited.operations", "c")) == statuses[429]
    assert statsd.values(f"{per_policy}.limiter.effective_rate", "g"), "the limiter's rate"
    assert sum(statsd.values(f"{per_policy}.throttled_seconds.limiter", "c")) > 0, "Retry-After"

    ledger = {
        row["state"]: row["n"]
        for row in db.execute(
            "SELECT state, count(*) AS n FROM retention.operations WHERE policy = %s GROUP BY 1",
            (unique_name,),
        )
    }
    assert ledger.get("dead") == 1
    for state in ("pending", "in_flight", "dead"):
        assert statsd.last_gauge(f"{per_policy}.operations.{state}") == ledger.get(state, 0)
    assert statsd.last_gauge(f"{per_policy}.dead_letters.operations") == 1
    run = run_row(db, unique_name)
    assert sum(statsd.values(f"{per_policy}.rows_deleted", "c")) == run["rows_deleted"] == 59
    assert statsd.last_gauge(f"{per_policy}.rows_remaining") == run["rows_remaining"] == 1
    age = statsd.last_gauge(f"{per_policy}.oldest_eligible_age_seconds")
    oldest = db.execute(
        f"SELECT extract(epoch FROM now() - min(created_at))::float8 AS age "  # noqa: S608
        f"FROM public.{unique_name} WHERE created_at < %s",
        (CUTOFF,),
    ).fetchone()["age"]
    assert 0 < age <= oldest, "the dead row's age, read at reconcile (a little earlier)"
