"""The run's status rule, as a table: one pure function decides clean, dirty, backlog
and dry run from the facts reconcile gathered (windows that failed or were cancelled
count as unfinished), and cancelled from those of a run stopped before its reconcile;
what the view shows for a run (its status, or running, failed, unfinished) is a table too."""

from __future__ import annotations

import re

import pytest

from retention.runs.status import (
    RemoteFacts,
    RunFacts,
    RunStatus,
    ShownState,
    StoppedFacts,
    run_status,
    shown_state,
)


def remote(
    unexplained: int = 0, lag: float | None = 1.0, limit: float | None = 24.0
) -> RemoteFacts:
    return RemoteFacts(unexplained_rows=unexplained, oldest_overdue_hours=lag, max_lag_hours=limit)


CASES = [
    # (name, facts, status)
    ("nothing left", RunFacts(dry_run=False, rows_remaining=0), "clean"),
    ("rows left, local policy", RunFacts(dry_run=False, rows_remaining=3), "dirty"),
    ("only held rows left", RunFacts(dry_run=False, rows_remaining=0, rows_held=4), "clean"),
    (
        "held rows and others left",
        RunFacts(dry_run=False, rows_remaining=1, rows_held=4),
        "dirty",
    ),
    ("dry run with rows", RunFacts(dry_run=True, rows_remaining=500), "dry_run"),
    (
        "dry run ignores every problem",
        RunFacts(
            dry_run=True,
            rows_remaining=5,
            windows_unfinished=2,
            partition_problems=1,
            event_problems=1,
            remote=remote(unexplained=5, lag=99.0),
        ),
        "dry_run",
    ),
    (
        "failed or cancelled window, table empty",
        RunFacts(dry_run=False, rows_remaining=0, windows_unfinished=1),
        "dirty",
    ),
    (
        "partition not dropped, table empty",
        RunFacts(dry_run=False, rows_remaining=0, partition_problems=1),
        "dirty",
    ),
    (
        "event problem, table empty",
        RunFacts(dry_run=False, rows_remaining=0, event_problems=1),
        "dirty",
    ),
    (
        "orphans in a listed child without a constraint, table empty",
        RunFacts(dry_run=False, rows_remaining=0, orphans=6),
        "dirty",
    ),
    ("remote, nothing left", RunFacts(dry_run=False, rows_remaining=0, remote=remote()), "clean"),
    (
        "remote, every row explained, within lag",
        RunFacts(dry_run=False, rows_remaining=7, remote=remote()),
        "backlog",
    ),
    (
        "remote, explained, no limit set",
        RunFacts(dry_run=False, rows_remaining=7, remote=remote(lag=500.0, limit=None)),
        "backlog",
    ),
    (
        "remote, explained, no overdue figure",
        RunFacts(dry_run=False, rows_remaining=7, remote=remote(lag=None)),
        "backlog",
    ),
    (
        "remote, lag exactly at the limit",
        RunFacts(dry_run=False, rows_remaining=7, remote=remote(lag=24.0)),
        "backlog",
    ),
    (
        "remote, later than max_lag_hours",
        RunFacts(dry_run=False, rows_remaining=7, remote=remote(lag=24.5)),
        "dirty",
    ),
    (
        "remote, unexplained rows",
        RunFacts(dry_run=False, rows_remaining=7, remote=remote(unexplained=1)),
        "dirty",
    ),
    (
        "remote backlog but a window failed",
        RunFacts(dry_run=False, rows_remaining=7, windows_unfinished=1, remote=remote()),
        "dirty",
    ),
    (
        "remote backlog but a partition not dropped",
        RunFacts(dry_run=False, rows_remaining=7, partition_problems=2, remote=remote()),
        "dirty",
    ),
    (
        "remote backlog but events dead",
        RunFacts(dry_run=False, rows_remaining=7, event_problems=1, remote=remote()),
        "dirty",
    ),
    ("stopped, no window still runs", StoppedFacts(windows_running=0), "cancelled"),
    (
        "stopped again, none runs",
        StoppedFacts(windows_running=0, recorded=RunStatus.CANCELLED),
        "cancelled",
    ),
    ("stopped, another window works on", StoppedFacts(windows_running=1), "planned"),
    (
        "stopped once, a cleared window works again",
        StoppedFacts(windows_running=2, recorded=RunStatus.CANCELLED),
        "cancelled",
    ),
]


@pytest.mark.parametrize(("facts", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_run_status(facts: RunFacts | StoppedFacts, expected: str) -> None:
    status = run_status(facts)
    assert status == expected
    assert isinstance(status, RunStatus)


def test_every_stored_status_is_a_run_status() -> None:
    """Every status retention.runs may hold (its CHECK constraint) is a member, no more."""
    from retention.paths import SQL_DIR

    schema = (SQL_DIR / "schema.sql").read_text()
    check = schema[schema.index("runs_status_check") :].split("\n", 1)[0]
    assert set(re.findall(r"'(\w+)'::text", check)) == {status.value for status in RunStatus}


SHOWN = [
    # (stored status, Airflow's state of the run, holds the run lease, shown)
    ("clean", "running", False, "clean"),  # reconcile wrote it: the ledger's word
    ("dirty", None, False, "dirty"),
    ("backlog", "success", False, "backlog"),
    ("dry_run", None, False, "dry_run"),
    ("cancelled", "failed", False, "cancelled"),  # a stop recorded it
    ("planned", "running", False, "running"),
    ("planned", "queued", False, "running"),
    ("planned", None, True, "running"),  # Airflow does not know it; it holds the lease
    ("planned", "failed", True, "running"),  # the lease: its windows still work
    ("planned", "failed", False, "failed"),  # stopped before reconcile
    ("planned", None, False, "unfinished"),
    ("planned", "success", False, "unfinished"),
]


@pytest.mark.parametrize(("stored", "airflow_state", "holds_lease", "shown"), SHOWN)
def test_shown_state(stored: str, airflow_state: str | None, holds_lease: bool, shown: str) -> None:
    state = shown_state(RunStatus(stored), airflow_state, holds_lease=holds_lease)
    assert state == shown
    assert isinstance(state, RunStatus | ShownState)


def test_every_shown_state_is_reachable() -> None:
    reached = {shown_state(RunStatus(c[0]), c[1], holds_lease=c[2]) for c in SHOWN}
    assert reached == set(RunStatus) - {RunStatus.PLANNED} | set(ShownState)


def test_every_status_is_reachable() -> None:
    assert {run_status(c[1]) for c in CASES} == set(RunStatus)


def test_a_status_a_newer_release_stored_is_shown_as_it_is() -> None:
    """A rollback after a newer release ran can leave a status this release does not know
    in ``retention.runs``: the view shows it as its text instead of failing the page."""
    assert shown_state("archived", "success") == "archived"
    assert shown_state("planned", "running") == "running"
