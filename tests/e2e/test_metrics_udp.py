"""Metrics end to end: `airflow dags test` with StatsD on, received over real UDP.

Each test binds a UDP socket on loopback, runs a whole policy DAG as the
operator would (a subprocess of the ``airflow`` CLI with ``RETENTION_POLICIES``
and ``AIRFLOW_CONN_*`` in its environment, StatsD pointed at the socket), and
checks the ``retention.*`` lines that arrived against the database.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.seed import seed_event_logs
from retention.db.connection import Connection
from tests.support.policies import policy_fields, remote_fields
from tests.support.tables import create_media_table

pytestmark = pytest.mark.e2e

PREFIX = "airflow"  # Airflow's default statsd_prefix, set explicitly below
TODAY = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
LOGICAL_DATE = TODAY - dt.timedelta(days=1)
CUTOFF = LOGICAL_DATE - dt.timedelta(days=30)  # retain_days 30
LINE = re.compile(r"^(?P<name>[^:]+):(?P<value>-?[0-9.eE+-]+)\|(?P<type>c|g|ms)(\|@[0-9.]+)?$")


@dataclass
class StatsdReceiver:
    """A UDP socket on loopback that keeps every StatsD line it receives, in order."""

    sock: socket.socket
    lines: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def listen(self) -> None:
        while not self.stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            with self.arrived:
                self.lines.extend(data.decode().splitlines())
                self.arrived.notify_all()

    def wait_for(self, name: str, timeout: float = 10.0) -> None:
        """Until a line of ``airflow.<name>`` has been read (sent before the run ended, it
        is already in the socket's buffer; this waits for the reader thread only)."""
        start = f"{PREFIX}.{name}:"
        with self.arrived:
            seen = self.arrived.wait_for(
                lambda: any(line.startswith(start) for line in self.lines), timeout
            )
        assert seen, f"no {name!r} line arrived; retention lines: {self.retention_names()}"

    def values(self, name: str, kind: str) -> list[float]:
        """Every value sent under ``airflow.<name>`` as type ``c``, ``g`` or ``ms``."""
        found = []
        for line in self.lines:
            match = LINE.match(line)
            assert match, f"not a StatsD line: {line!r}"
            if match["name"] == f"{PREFIX}.{name}" and match["type"] == kind:
                found.append(float(match["value"]))
        return found

    def last_gauge(self, name: str) -> float:
        values = self.values(name, "g")
        assert values, f"no gauge {name!r} arrived; retention lines: {self.retention_names()}"
        return values[-1]

    def retention_names(self) -> set[str]:
        names = (line.partition(":")[0] for line in self.lines)
        return {n for n in names if n.startswith(f"{PREFIX}.retention.")}


@pytest.fixture
def statsd() -> Iterator[StatsdReceiver]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    receiver = StatsdReceiver(sock)
    thread = threading.Thread(target=receiver.listen, daemon=True)
    thread.start()
    yield receiver
    receiver.stop.set()
    thread.join(timeout=5)
    sock.close()


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
