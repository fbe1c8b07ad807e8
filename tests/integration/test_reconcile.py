"""Reconciliation: clean, dirty inside windows, dirty outside windows, dry runs."""

from __future__ import annotations

import datetime as dt

import pytest
from psycopg import sql

from devtools.plans import CUTOFF, request
from retention.db.connection import Connection
from retention.evidence.reconcile import RetentionIncomplete, raise_if_dirty, reconcile_run
from retention.rows.deleter import delete_window
from retention.rows.planner import plan_windows
from tests.support.children import create_family, family_children
from tests.support.policies import make_policy
from tests.support.tables import create_table, new, old

THIRTY_DAYS = dt.timedelta(days=30)  # make_policy's retain_days


def run_all(db: Connection, policy, **kw) -> None:
    for window in plan_windows(db, request(policy, **kw)):
        delete_window(
            db, policy, window, batch_rows=policy.batch_rows, dry_run=kw.get("dry_run", False)
        )


def test_clean_run_summary(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, i % 3, old() if i <= 50 else new()) for i in range(1, 81)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=4)
    run_all(db, policy)
    summary = reconcile_run(db, policy, "run-1")
    raise_if_dirty(summary)
    assert summary["status"] == "clean"
    assert (summary["rows_deleted"], summary["rows_remaining"], summary["rows_planned"]) == (
        50,
        0,
        50,
    )
    stored = db.execute(
        "SELECT status, rows_deleted, rows_remaining, windows, dry_run FROM retention.runs "
        "WHERE policy = %s AND run_id = 'run-1'",
        (unique_name,),
    ).fetchone()
    assert stored == {
        "status": "clean",
        "rows_deleted": 50,
        "rows_remaining": 0,
        "windows": summary["windows"],
        "dry_run": False,
    }


def test_rows_left_in_a_window_fail_loudly(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 31)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5)
    windows = plan_windows(db, request(policy))
    for window in windows[:-1]:
        delete_window(db, policy, window, batch_rows=5, dry_run=False)
    summary = reconcile_run(db, policy, "run-1")
    last = windows[-1]
    left = last.last_id - last.first_id + 1
    assert (summary["status"], summary["rows_remaining_in_windows"]) == ("dirty", left)
    with pytest.raises(
        RetentionIncomplete,
        match=rf"{left} rows older than cutoff .*\(ids {last.first_id}–{last.last_id}: {left}",
    ):
        raise_if_dirty(summary)


def test_rows_outside_the_plan_are_unexplained(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 11)])
    policy = make_policy(unique_name)
    run_all(db, policy)
    db.execute(
        f"INSERT INTO public.{unique_name} (id, tenant_id, created_at) VALUES (500, 1, %s)",  # noqa: S608
        (old(),),
    )
    summary = reconcile_run(db, policy, "run-1")
    assert (summary["rows_outside_windows"], summary["status"]) == (1, "dirty")
    with pytest.raises(RetentionIncomplete, match="1 are outside every planned window"):
        raise_if_dirty(summary)


def test_dry_run_reports_the_count_and_does_not_fail(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, i % 4, old() if i % 2 else new()) for i in range(1, 101)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5)
    run_all(db, policy, dry_run=True)
    summary = reconcile_run(db, policy, "run-1")
    raise_if_dirty(summary)
    assert summary["status"] == "dry_run"
    assert (summary["rows_counted"], summary["rows_deleted"], summary["rows_remaining"]) == (
        50,
        0,
        50,
    )


def test_reconcile_without_a_plan_says_so(db: Connection, unique_name: str) -> None:
    with pytest.raises(RuntimeError, match="has no recorded plan"):
        reconcile_run(db, make_policy(unique_name), "never-planned")


def test_the_summary_counts_rows_by_table_and_names_orphans(
    db: Connection, unique_name: str
) -> None:
    create_family(db, unique_name)
    children = family_children(unique_name)
    policy = make_policy(unique_name, window_rows=20, batch_rows=7, children=children)
    db.execute(
        sql.SQL(
            "DELETE FROM {c} WHERE rendition_id IN (SELECT id FROM {r} WHERE asset_id = 1)"
        ).format(
            c=sql.Identifier("public", f"{unique_name}_c"),
            r=sql.Identifier("public", f"{unique_name}_r"),
        )
    )  # behind retention's back: the last level has no constraint, so 8 rows lose their parent
    run_all(db, policy)
    summary = reconcile_run(db, policy, "run-1")
    assert summary["rows_deleted_by_table"] == {
        f"public.{unique_name}": 30,
        f"public.{unique_name}_r": 60,
        f"public.{unique_name}_c": 116,
        f"public.{unique_name}_p": 232,
    }
    assert summary["orphans"] == {f"public.{unique_name}_p": 8}
    assert (summary["status"], summary["rows_remaining"]) == ("dirty", 0)
    with pytest.raises(RetentionIncomplete, match=rf"Orphans .*\(public\.{unique_name}_p: 8\)"):
        raise_if_dirty(summary)


def test_a_date_whose_rows_a_later_date_deleted_first_says_which_run_did(
    db: Connection, unique_name: str
) -> None:
    """A backfill whose 11-27 ran before 11-25: the older date finds nothing left, and its
    summary says so instead of a bare "deleted 0"."""
    from retention.evidence.report import format_summary

    create_table(db, unique_name, [(i, 1, old() if i <= 20 else new()) for i in range(1, 41)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5)
    later = CUTOFF + dt.timedelta(days=2)
    run_all(db, policy, run_id="run-later", cutoff=later, logical_date=later + THIRTY_DAYS)
    first = reconcile_run(db, policy, "run-later")
    assert (first["status"], first["rows_deleted"]) == ("clean", 40)
    assert "covered_by" not in first, "nothing had deleted its rows before it"

    run_all(db, policy, run_id="run-earlier", cutoff=CUTOFF, logical_date=CUTOFF + THIRTY_DAYS)
    summary = reconcile_run(db, policy, "run-earlier")
    assert (summary["status"], summary["rows_deleted"]) == ("clean", 0)
    assert summary["covered_by"]["run_id"] == "run-later"
    note = "nothing older than 2026-03-01 was left: run 2026-04-02 deleted it"
    assert summary["covered_by"]["note"] == note
    assert note in format_summary(summary)
    stored = db.execute(
        "SELECT summary FROM retention.runs WHERE policy = %s AND run_id = 'run-earlier'",
        (unique_name,),
    ).fetchone()
    assert stored["summary"]["covered_by"]["note"] == note
