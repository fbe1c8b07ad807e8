"""Parallel runs (``pytest -n 2``, what ``make test`` does): a database pair and Airflow
home per worker, and the order in which the workers take the test files.

Each test session empties its target database when it starts (``clean_target``)
and the scheduler tests share the Airflow metadata database's pools, runs and
serialized DAGs, so two workers on one set of databases would undo each other's
work. Worker ``gw0`` (and a run without workers) uses the databases and home that
``.local/env`` names; worker ``gw1``, … uses copies with its name appended, made
by ``make test-env`` (``scripts/devenv.py --test-workers``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# The worker whose databases are the ones `.local/env` names.
FIRST_WORKER = "gw0"

# Files whose tests start a program in a clean environment that finds the test
# database through `.local/env` itself: they run on the first worker only.
FIRST_WORKER_FILES = frozenset({"tests/integration/test_cli.py"})

# Seconds a file takes (`--durations=0` summed per file; two workers on 2 busy cores),
# for handing out the longest files first so that both workers finish together. Files
# not listed are weighed by their number of tests (see `estimated_seconds`); a stale
# figure only costs balance, never a test.
MEASURED_SECONDS = {
    "tests/e2e/test_scheduler_pools.py": 240,
    "tests/e2e/test_alerts_scheduler.py": 90,
    "tests/e2e/test_metrics_udp.py": 56,
    "tests/e2e/test_retention_ui.py": 53,
    "tests/e2e/test_scheduler_stop.py": 49,
    "tests/integration/test_remote_limits.py": 48,
    "tests/e2e/test_replay_guard.py": 37,
    "tests/dag/test_future_logical_date.py": 33,
    "tests/e2e/test_remote_dag.py": 29,
    "tests/integration/test_pg_restart.py": 27,
    "tests/e2e/test_run_serialization.py": 26,
    "tests/e2e/test_plugin_api.py": 26,
    "tests/integration/test_remote_ledger.py": 23,
    "tests/integration/test_health_pauses.py": 23,
    "tests/integration/test_remote_edges.py": 23,
    "tests/integration/test_ui_pages.py": 21,
    "tests/dag/test_tiers_without_postgres.py": 18,
    "tests/integration/test_events.py": 17,
    "tests/e2e/test_dag_e2e.py": 15,
    "tests/integration/test_cli.py": 13,
}
SECONDS_PER_TEST = {"tests/unit/": 0.05, "tests/dag/": 0.5, "tests/integration/": 1.0}
E2E_SECONDS_PER_TEST = 4.0


def use_worker_databases() -> None:
    """Point this process's test settings at its worker's copies (no-op outside workers).

    Rewrites the ``RETENTION_TEST_*`` variables ``.local/env`` set (and the
    Airflow connection made from them) before the fixtures read them.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or worker == FIRST_WORKER or "RETENTION_TEST_DSN" not in os.environ:
        return
    dsn = os.environ["RETENTION_TEST_DSN"]
    name = conninfo_to_dict(dsn)["dbname"]
    os.environ["RETENTION_TEST_DSN"] = make_conninfo(dsn, dbname=f"{name}_{worker}")
    if "RETENTION_TEST_CONN" in os.environ:
        conn = json.loads(os.environ["RETENTION_TEST_CONN"])
        conn["schema"] = f"{conn['schema']}_{worker}"
        os.environ["RETENTION_TEST_CONN"] = json.dumps(conn)
        os.environ["AIRFLOW_CONN_RETENTION_TEST"] = os.environ["RETENTION_TEST_CONN"]
    if "RETENTION_TEST_SQL_ALCHEMY_CONN" in os.environ:
        from sqlalchemy.engine import make_url

        url = make_url(os.environ["RETENTION_TEST_SQL_ALCHEMY_CONN"])
        os.environ["RETENTION_TEST_SQL_ALCHEMY_CONN"] = url.set(
            database=f"{url.database}_{worker}"
        ).render_as_string(hide_password=False)
    if "RETENTION_TEST_AIRFLOW_HOME" in os.environ:
        home = Path(os.environ["RETENTION_TEST_AIRFLOW_HOME"])
        os.environ["RETENTION_TEST_AIRFLOW_HOME"] = str(home.with_name(f"{home.name}-{worker}"))


def estimated_seconds(path: str, tests: int) -> float:
    if path in MEASURED_SECONDS:
        return MEASURED_SECONDS[path]
    for folder, seconds in SECONDS_PER_TEST.items():
        if path.startswith(folder):
            return tests * seconds
    return tests * E2E_SECONDS_PER_TEST


try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # pytest-xdist is a development dependency only
    LoadFileScheduling = None


if LoadFileScheduling is not None:

    class LongestFileFirst(LoadFileScheduling):
        """``--dist loadfile`` (a file's tests on one worker, so a module-scoped
        scheduler starts once), handing out the longest file left first, and the
        ``FIRST_WORKER_FILES`` to the first worker only."""

        def _assign_work_unit(self, node: Any) -> None:
            allowed = [
                scope
                for scope in self.workqueue
                if scope not in FIRST_WORKER_FILES or node.gateway.id == FIRST_WORKER
            ]
            if not allowed:
                if not self._pending_of(self.assigned_work.get(node, {})):
                    node.shutdown()
                return
            scope = max(allowed, key=lambda s: estimated_seconds(s, len(self.workqueue[s])))
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        """This suite's plan for ``-n`` with ``--dist load`` (the default) or ``loadfile``;
        any other ``--dist`` keeps pytest-xdist's own."""
        if config.getoption("dist") in ("load", "loadfile"):
            return LongestFileFirst(config, log)
        return None
