"""Without PostgreSQL (``astro dev pytest``, a laptop with the server stopped) the unit and
DAG tiers still run and pass, and every test that needs the database skips and says why."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.support.env import ROOT, clean_pytest_environment

THIS_FILE = Path(__file__).resolve()


# A developer's own pytest settings, which the inner runs must not inherit: with them
# the inner run stops at its first error and prints less.
PARENT_ADDOPTS = "-x -q"


def test_database_tests_skip_with_the_reason_when_no_postgres_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_ADDOPTS", PARENT_ADDOPTS)
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        env = clean_pytest_environment(
            RETENTION_TEST_DSN=f"host=127.0.0.1 port={port} dbname=retention user=postgres",
            # as on Astro, where no `.local/env` says that this checkout has a database
            RETENTION_TEST_REQUIRE_DB="0",
        )
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-rs",
                "-p",
                "no:cacheprovider",
                f"--basetemp={tmp_path / 'pytest'}",
                f"--junitxml={tmp_path / 'report.xml'}",
                f"--ignore={THIS_FILE}",
                "tests/unit",
                "tests/dag",
                "tests/integration/test_audit.py",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    cases = ElementTree.parse(tmp_path / "report.xml").getroot().iter("testcase")
    outcomes: dict[str, str] = {}
    for case in cases:
        skipped = case.find("skipped")
        failed = case.find("failure") is not None or case.find("error") is not None
        name = f"{case.get('classname')}.{case.get('name')}"
        outcomes[name] = (
            "failed" if failed else skipped.get("message", "") if skipped is not None else "passed"
        )
    assert not [name for name, outcome in outcomes.items() if outcome == "failed"]
    unit = [name for name in outcomes if name.startswith("tests.unit.")]
    assert unit, "the unit tier ran"
    needing = [name for name in unit if "no test database" in outcomes[name]]
    assert needing == [], "the unit tier needs no database"
    audit = {name: o for name, o in outcomes.items() if name.startswith("tests.integration.")}
    assert len(audit) == 3, audit
    for reason in audit.values():
        assert f"no test database answers at 127.0.0.1:{port} (RETENTION_TEST_DSN)" in reason
        assert "start PostgreSQL or run `make env`" in reason


def test_a_checkout_that_has_a_database_fails_instead_of_skipping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make env` sets RETENTION_TEST_REQUIRE_DB=1: there a missing server is loud."""
    monkeypatch.setenv("PYTEST_ADDOPTS", PARENT_ADDOPTS)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        env = clean_pytest_environment(
            RETENTION_TEST_DSN=f"host=127.0.0.1 port={port} dbname=retention user=postgres",
            RETENTION_TEST_REQUIRE_DB="1",
        )
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--basetemp={tmp_path / 'pytest'}",
                "tests/integration/test_audit.py",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "3 errors" in out.strip().splitlines()[-1], out[-4000:]
    assert "RETENTION_TEST_REQUIRE_DB=1" in out
