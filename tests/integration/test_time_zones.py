"""Cutoffs are UTC whatever the database's time zone; naive columns are read in the
policy's ``timestamp_timezone`` (default UTC). Each case runs in a database of its own
whose default time zone is set with ``ALTER DATABASE … SET timezone``."""

from __future__ import annotations

import datetime as dt

import pytest

from devtools.plans import CUTOFF, request
from retention.db.connection import connect_dsn
from retention.db.migrate import migrate
from retention.evidence.reconcile import reconcile_run
from retention.rows.deleter import delete_window
from retention.rows.planner import plan_windows
from tests.support.policies import make_policy
from tests.support.tables import create_table, ids_left

HOUR = dt.timedelta(hours=1)


def run(dsn: str, name: str, rows, timestamp_type: str = "timestamp", **policy) -> list[int]:
    """Plan, delete and reconcile one table; returns the ids left."""
    with connect_dsn(dsn) as conn:
        migrate(conn)
        create_table(conn, name, rows, timestamp_type=timestamp_type)
        spec = make_policy(name, **policy)
        for window in plan_windows(conn, request(spec)):
            delete_window(conn, spec, window, batch_rows=100, dry_run=False)
        summary = reconcile_run(conn, spec, "run-1")
        assert summary["status"] == "clean", summary
        return ids_left(conn, name)


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "America/Los_Angeles", "UTC"])
def test_a_naive_column_is_read_in_utc_whatever_the_database_zone(
    fresh_database, unique_name: str, zone: str
) -> None:
    dsn = fresh_database(timezone=zone)
    rows = [
        (1, 1, CUTOFF - HOUR),  # eligible by UTC
        (2, 1, CUTOFF + HOUR),  # kept
        (3, 1, CUTOFF + 8 * HOUR),  # kept (Tokyo would read it as an hour too old)
        (4, 1, CUTOFF - 5 * HOUR),  # eligible (Los Angeles would read it as 3 h too young)
    ]
    assert run(dsn, unique_name, rows) == [2, 3]


@pytest.mark.parametrize("database_zone", ["Asia/Tokyo", "America/Los_Angeles"])
def test_timestamp_timezone_says_how_naive_wall_times_are_read(
    fresh_database, unique_name: str, database_zone: str
) -> None:
    dsn = fresh_database(timezone=database_zone)
    tokyo = dt.timedelta(hours=9)
    rows = [  # stored as Tokyo wall time (UTC + 9 h), written here as UTC + 9 h
        (1, 1, CUTOFF - HOUR + tokyo),  # an hour before the cutoff in Tokyo: eligible
        (2, 1, CUTOFF + HOUR + tokyo),  # an hour after: kept
    ]
    assert run(dsn, unique_name, rows, timestamp_timezone="Asia/Tokyo") == [2]


def test_a_timestamptz_column_never_depended_on_the_zone(fresh_database, unique_name) -> None:
    dsn = fresh_database(timezone="Asia/Tokyo")
    rows = [(1, 1, CUTOFF - dt.timedelta(microseconds=1)), (2, 1, CUTOFF)]
    assert run(dsn, unique_name, rows, timestamp_type="timestamptz") == [2]


def test_every_session_of_the_package_is_utc(fresh_database) -> None:
    dsn = fresh_database(timezone="Asia/Tokyo")
    with connect_dsn(dsn) as conn:
        assert conn.execute("SHOW TimeZone").fetchone() == {"TimeZone": "UTC"}


def test_an_unknown_zone_is_refused_by_name() -> None:
    from retention.policy import parse_policy
    from tests.support.policies import policy_fields

    policy, problems = parse_policy("p", policy_fields("p", timestamp_timezone="Mars/Olympus"))
    assert policy is None
    assert [str(p) for p in problems] == [
        "policy 'p', field 'timestamp_timezone': 'Mars/Olympus' is not an IANA time zone name "
        "such as 'UTC'"
    ]
