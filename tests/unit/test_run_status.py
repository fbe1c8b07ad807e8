"""The run's status rule, as a table: one pure function decides clean, dirty, backlog
and dry run from the facts reconcile gathered (windows that failed or were cancelled
count as unfinished)."""

from __future__ import annotations

import pytest

from retention.runs.status import RemoteFacts, RunFacts, RunStatus, run_status


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
]


@pytest.mark.parametrize(("facts", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_run_status(facts: RunFacts, expected: str) -> None:
    status = run_status(facts)
    assert status == expected
    assert isinstance(status, RunStatus)


def test_every_status_is_reachable() -> None:
    assert {run_status(c[1]) for c in CASES} == set(RunStatus)
