"""Reconcile builds a typed RunSummary; what it stores in retention.runs and returns as
the XCom is that summary's JSON, and it reads back equal. ``retention.runs.summary`` is a
contract external readers parse: a real stored summary of each kind (rows, dry run,
remote, partitions, cancelled) reads back typed and writes back the very same JSON, and
the partial summary of a cancelled run is the one the SQL used to build by hand."""

from __future__ import annotations

import json
from typing import Any

import pytest
from psycopg import sql

from devtools.plans import request
from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.evidence.reconcile import reconcile, reconcile_run
from retention.rows.deleter import delete_window
from retention.rows.planner import plan_windows
from retention.runs.lease import record_stopped_run
from retention.summary import (
    BoundEvidence,
    DirtyWindow,
    DrainEvidence,
    OtherRun,
    PartitionAttempt,
    PartitionClosed,
    PartitionStranded,
    RemoteEvidence,
    RunStatus,
    RunSummary,
)
from tests.support.policies import make_policy, remote_policy
from tests.support.remote import enqueue_all, work
from tests.support.tables import create_media_table, create_table, new, old
from tests.unit.test_run_summary import LOCAL_KEYS


def test_the_stored_summary_is_the_typed_summary_json(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, 1, old() if i <= 20 else new()) for i in range(1, 31)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5)
    windows = plan_windows(db, request(policy))
    for window in windows[:-1]:
        delete_window(db, policy, window, batch_rows=5, dry_run=False)
    summary = reconcile(db, policy, "run-1")
    assert isinstance(summary, RunSummary)
    assert (summary.status, summary.rows_remaining) == ("dirty", summary.rows_remaining_in_windows)
    assert [w.window_key for w in summary.dirty_windows] == [windows[-1].window_key]
    row = db.execute(
        "SELECT status, summary FROM retention.runs WHERE policy = %s AND run_id = 'run-1'",
        (unique_name,),
    ).fetchone()
    assert row["status"] == summary.status
    assert row["summary"] == summary.to_json()
    assert set(row["summary"]) == {*LOCAL_KEYS, "other_runs"}
    assert RunSummary.of(row["summary"]) == summary
    again = reconcile_run(db, policy, "run-1")
    assert list(again) == list(summary.to_json())


# What run_record_stopped.sql built by hand before RunSummary built the partial summary:
# the contract its JSON keeps, to the byte (the same keys and values; the moment of the
# stop too, when both are built in one transaction), as the text of the stored jsonb.
PARTIAL_AS_SQL_BUILT_IT = """
SELECT jsonb_build_object(
    'policy', r.policy, 'dag_id', r.dag_id, 'run_id', r.run_id, 'plan_id', r.plan_id,
    'table', r.table_name,
    'status', CASE WHEN w.running = 0 THEN 'cancelled' ELSE r.status END, 'partial', true,
    'reason', %(reason)s::text, 'dry_run', r.dry_run, 'cutoff', r.cutoff,
    'windows', w.windows, 'windows_by_state', w.by_state, 'rows_planned', r.rows_planned,
    'rows_deleted', w.rows_deleted + d.rows_deleted, 'rows_deleted_by_windows', w.rows_deleted,
    'rows_deleted_by_drain', d.rows_deleted,
    'rows_counted', CASE WHEN r.dry_run THEN w.rows_counted END, 'stopped_at', now()
)::text AS summary
FROM retention.runs AS r,
(
    SELECT coalesce(sum(n), 0) AS windows, coalesce(sum(deleted), 0) AS rows_deleted,
           sum(counted) AS rows_counted,
           coalesce(sum(n) FILTER (WHERE state = 'running'), 0) AS running,
           coalesce(jsonb_object_agg(state, n), jsonb_build_object()) AS by_state
    FROM (
        SELECT state, count(*) AS n, sum(rows_deleted) AS deleted, sum(rows_counted) AS counted
        FROM retention.windows
        WHERE policy = %(policy)s
          AND plan_id = (SELECT plan_id FROM retention.runs
                         WHERE policy = %(policy)s AND run_id = %(run_id)s)
        GROUP BY state
    ) AS by_state
) AS w,
(
    SELECT coalesce(sum((pass ->> 'rows_deleted')::bigint), 0) AS rows_deleted
    FROM retention.runs AS passes,
         jsonb_array_elements(coalesce(passes.drain, jsonb_build_array())) AS pass
    WHERE passes.policy = %(policy)s AND passes.run_id = %(run_id)s
) AS d
WHERE r.policy = %(policy)s AND r.run_id = %(run_id)s
"""


def stored_summary(db: Connection, policy: str, run_id: str) -> dict[str, Any]:
    row = db.execute(
        "SELECT status, summary FROM retention.runs WHERE policy = %s AND run_id = %s",
        (policy, run_id),
    ).fetchone()
    assert row is not None
    assert row["summary"] is not None
    assert row["summary"]["status"] == row["status"]
    return row["summary"]


def round_trips(stored: dict[str, Any]) -> RunSummary:
    """The stored JSON read typed writes back the same JSON: no key, shape or value changed."""
    summary = RunSummary.from_stored(stored)
    assert summary is not None
    assert summary.to_json() == stored
    assert RunSummary.from_stored(json.dumps(stored)) == summary, "its JSON text reads the same"
    assert isinstance(summary.status, RunStatus)
    return summary


def test_a_rows_run_with_another_run_at_work_round_trips(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, 1, old() if i <= 20 else new()) for i in range(1, 31)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5)
    mine = plan_windows(db, request(policy, "run-1"))
    other = plan_windows(db, request(policy, "run-0"))  # a cleared task of another run
    delete_window(db, policy, other[0], batch_rows=5, dry_run=False)
    for window in mine[:-1]:
        delete_window(db, policy, window, batch_rows=5, dry_run=False)
    reconcile(db, policy, "run-1")
    stored = stored_summary(db, unique_name, "run-1")
    summary = round_trips(stored)
    assert summary.status == RunStatus.DIRTY
    [other_run] = summary.other_runs
    assert isinstance(other_run, OtherRun)
    assert (other_run.run_id, other_run.windows) == ("run-0", 1)
    assert set(stored["other_runs"][0]) == {
        "run_id",
        "windows",
        "rows_deleted",
        "first_started",
        "last_finished",
    }
    assert isinstance(summary.dirty_windows[0], DirtyWindow)


def test_a_dry_run_round_trips(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, 1, old() if i <= 20 else new()) for i in range(1, 31)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5)
    for window in plan_windows(db, request(policy, "run-dry", dry_run=True)):
        delete_window(db, policy, window, batch_rows=5, dry_run=True)
    reconcile(db, policy, "run-dry")
    summary = round_trips(stored_summary(db, unique_name, "run-dry"))
    assert (summary.status, summary.dry_run, summary.rows_counted) == (RunStatus.DRY_RUN, True, 20)


def test_a_remote_run_with_a_failed_drain_pass_round_trips(
    db: Connection, unique_name: str, sandbox: Any, test_dsn: str
) -> None:
    create_media_table(db, unique_name, 12)
    policy = remote_policy(unique_name, rate_per_second=200, burst=20, claim_batch=4)
    enqueue_all(db, policy)  # run-1
    work(test_dsn, policy, sandbox)
    for drained in ({"rows_deleted": 0}, {"rows_deleted": 0, "error": "ConnectError: refused"}):
        db.execute(
            query("run_record_drain"),
            {"policy": unique_name, "run_id": "run-1", "drain": json.dumps(drained)},
        )
    reconcile(db, policy, "run-1")
    stored = stored_summary(db, unique_name, "run-1")
    summary = round_trips(stored)
    assert isinstance(summary.remote, RemoteEvidence)
    assert isinstance(summary.drain, DrainEvidence)
    assert isinstance(summary.bound, BoundEvidence)
    assert (summary.drain.passes, summary.drain.errors) == (2, ["ConnectError: refused"])
    assert set(stored["drain"]) == {"passes", "rows_deleted", "errors", "note"}
    assert summary.drain.note is not None
    assert summary.drain.note.startswith("a pass failed")


def test_a_partitions_run_round_trips(db: Connection, unique_name: str) -> None:
    from tests.integration.test_partitions import (
        detached_by_an_earlier_attempt,
        fast_path,
        run_windows,
    )

    policy, first, _oid = detached_by_an_earlier_attempt(db, unique_name)
    view = sql.Identifier("public", f"{unique_name}_v")
    db.execute(sql.SQL("CREATE VIEW {} AS SELECT * FROM {}").format(view, sql.SQL(first)))
    fast_path(db, policy)  # drops the others; the view keeps the first one detached
    run_windows(db, policy)
    stored = stored_summary(db, unique_name, "run-1")
    summary = round_trips(stored)
    assert summary.status == RunStatus.DIRTY
    assert summary.partitions
    assert all(isinstance(p, PartitionAttempt) for p in summary.partitions)
    [stranded] = summary.partitions_stranded
    assert isinstance(stranded, PartitionStranded)
    assert (stranded.partition, stranded.run_id, stranded.drop_attempts) == (first, "run-0", 1)
    assert set(stored["partitions"][0]) == {
        "partition",
        "bounds",
        "estimated_rows",
        "action",
        "state",
    }
    assert set(stored["partitions_stranded"][0]) == {
        "partition",
        "run_id",
        "state",
        "error",
        "drop_attempts",
        "table_now",
    }
    db.execute(sql.SQL("DROP VIEW {}").format(view))
    fast_path(db, policy, run_id="run-2")  # finishes the earlier attempt's drop
    run_windows(db, policy, run_id="run-2")
    stored = stored_summary(db, unique_name, "run-2")
    summary = round_trips(stored)
    [closed] = summary.partitions_finished
    assert isinstance(closed, PartitionClosed)
    assert (closed.partition, closed.run_id, closed.state) == (first, "run-0", "dropped")
    assert set(stored["partitions_finished"][0]) == {"partition", "run_id", "action", "state"}


def stored_and_as_sql_built(
    db: Connection, policy: str, run_id: str, reason: str
) -> tuple[dict[str, Any], str, str]:
    """Stop the run, and in the same transaction (one ``now()``) build what the old
    statement would have stored: the stored row, its summary's text and the old one's."""
    with db.transaction():
        assert record_stopped_run(db, policy, run_id, reason)
        row = db.execute(
            "SELECT status, finished_at, summary, summary::text AS text FROM retention.runs"
            " WHERE policy = %s AND run_id = %s",
            (policy, run_id),
        ).fetchone()
        assert row is not None
        params = {"policy": policy, "run_id": run_id, "reason": reason}
        as_sql_built = db.execute(PARTIAL_AS_SQL_BUILT_IT, params).fetchone()["summary"]
    return row, row["text"], as_sql_built


@pytest.mark.parametrize(
    ("dry_run", "still_running"), [(False, False), (True, False), (False, True)]
)
def test_a_stopped_run_stores_the_partial_summary_sql_built_byte_for_byte(
    db: Connection, unique_name: str, dry_run: bool, still_running: bool
) -> None:
    """A run stopped before reconcile: RunSummary.stopped stores exactly the text the SQL
    built by hand before, every key (the cutoff and the moment of the stop as Postgres
    writes them, ".12", not ".120000"), whether it is cancelled or still works ('planned',
    a window still running, finished_at NULL); it reads back typed and writes back the same."""
    create_table(db, unique_name, [(i, 1, old() if i <= 20 else new()) for i in range(1, 31)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5)
    first, second, *_ = plan_windows(db, request(policy, "run-1", dry_run=dry_run))
    delete_window(db, policy, first, batch_rows=5, dry_run=dry_run)
    db.execute(query("window_start"), {"window_key": second.window_key})
    db.execute(
        query("run_record_drain"),
        {"policy": unique_name, "run_id": "run-1", "drain": json.dumps({"rows_deleted": 2})},
    )
    db.execute(
        "UPDATE retention.windows SET state = %s, rows_deleted = 3 WHERE window_key = %s",
        ("running" if still_running else "cancelled", second.window_key),
    )
    db.execute(  # a fraction whose isoformat() ("…00.120000") is not Postgres's ("…00.12")
        "UPDATE retention.runs SET cutoff = '2026-01-01 00:00:00.12+00'"
        " WHERE policy = %s AND run_id = 'run-1'",
        (unique_name,),
    )
    row, stored_text, as_sql_built = stored_and_as_sql_built(db, unique_name, "run-1", "SIGTERM")
    assert stored_text == as_sql_built, "the very text the old statement stored"
    stored = row["summary"]
    assert stored["cutoff"] == "2026-01-01T00:00:00.12+00:00"
    assert (stored["rows_deleted"], stored["rows_deleted_by_drain"]) == (
        (5, 2) if dry_run else (15, 2)
    )
    summary = round_trips(stored_summary(db, unique_name, "run-1"))
    assert summary.partial is True
    assert summary.rows_counted == (10 if dry_run else None)
    if still_running:
        assert (summary.status, row["finished_at"]) == (RunStatus.PLANNED, None)
        assert summary.windows_by_state is not None
        assert summary.windows_by_state["running"] == 1
    else:
        assert summary.status == RunStatus.CANCELLED
        assert row["finished_at"] is not None
    assert not record_stopped_run(db, unique_name, "run-2", "SIGTERM"), "no such run"
