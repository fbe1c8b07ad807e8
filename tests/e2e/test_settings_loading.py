"""`make env` loads the pools of `airflow_settings.yaml` and leaves its Astro connections
alone: the local AIRFLOW_CONN_* variables define them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.env import ROOT


def test_load_settings_creates_the_pools_and_adds_no_astro_connection() -> None:
    if "RETENTION_TEST_SQL_ALCHEMY_CONN" not in os.environ:
        pytest.skip("no test metadata database: run `make test-env`")
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "load_settings.py")],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "pool retention_db: 2 slots" in run.stdout
    assert "pool media_api: 4 slots" in run.stdout
    for conn_id in ("retention_target", "media_api", "media_events", "retention_hints"):
        assert f"connection {conn_id} added" not in run.stdout
