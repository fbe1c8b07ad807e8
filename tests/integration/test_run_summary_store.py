"""Reconcile builds a typed RunSummary; what it stores in retention.runs and returns as
the XCom is that summary's JSON, and it reads back equal."""

from __future__ import annotations

from devtools.plans import request
from retention.db.connection import Connection
from retention.evidence.reconcile import reconcile, reconcile_run
from retention.rows.deleter import delete_window
from retention.rows.planner import plan_windows
from retention.summary import RunSummary
from tests.support.policies import make_policy
from tests.support.tables import create_table, new, old
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
