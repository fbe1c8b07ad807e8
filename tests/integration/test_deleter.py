"""Deleting windows against the real Postgres: bounds, idempotence, timeouts that split batches."""

from __future__ import annotations

import psycopg
import pytest

from devtools.plans import CUTOFF, request
from retention.db.connection import Connection
from retention.rows.deleter import WindowDeleteError, delete_window
from retention.rows.lifecycle import count_window
from retention.rows.planner import plan_windows
from tests.support.policies import make_policy
from tests.support.tables import BOUNDARY_KEPT, boundary_rows, create_table, ids_left, new, old


def ledger(db: Connection, window_key: str) -> dict:
    row = db.execute(
        "SELECT * FROM retention.windows WHERE window_key = %s", (window_key,)
    ).fetchone()
    assert row is not None
    return row


def test_window_deletes_only_its_eligible_rows(db: Connection, unique_name: str) -> None:
    rows = [(i, 1 + i % 2, old(i) if i % 3 else new(i)) for i in range(1, 61)]
    rows.append((61, 1, CUTOFF))
    create_table(db, unique_name, rows)
    policy = make_policy(unique_name, window_rows=10, batch_rows=3, window_per_tenant=True)
    windows = plan_windows(db, request(policy))
    target = windows[0]
    result = delete_window(db, policy, target, batch_rows=3, dry_run=False)
    expected_gone = {
        i
        for i, tenant, ts in rows
        if target.first_id <= i <= target.last_id and tenant == int(target.tenant) and ts < CUTOFF
    }
    assert result.rows_deleted == len(expected_gone) > 0
    assert set(ids_left(db, unique_name)) == {r[0] for r in rows} - expected_gone
    row = ledger(db, target.window_key)
    assert (row["state"], row["rows_deleted"], row["attempts"]) == ("done", len(expected_gone), 1)
    assert row["batches"] == result.batches >= 4


def test_rerunning_a_window_deletes_nothing(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 21)])
    policy = make_policy(unique_name, window_rows=100, batch_rows=7)
    (target,) = plan_windows(db, request(policy))
    assert delete_window(db, policy, target, batch_rows=7, dry_run=False).rows_deleted == 20
    again = delete_window(db, policy, target, batch_rows=7, dry_run=False)
    assert again.rows_deleted == 0
    row = ledger(db, target.window_key)
    assert (row["rows_deleted"], row["attempts"]) == (20, 2)


def test_dry_run_counts_and_deletes_nothing(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, 1, old() if i <= 12 else new()) for i in range(1, 21)])
    policy = make_policy(unique_name, window_rows=100, batch_rows=7)
    (target,) = plan_windows(db, request(policy))
    result = delete_window(db, policy, target, batch_rows=7, dry_run=True)
    assert result.rows_counted == 12
    assert result.rows_deleted == 0
    assert len(ids_left(db, unique_name)) == 20
    assert ledger(db, target.window_key)["state"] == "counted"


def test_locked_row_splits_batches_and_the_window_still_empties(
    db: Connection, unique_name: str, test_dsn: str
) -> None:
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 41)])
    # The blocker is another client at work. Pacing would sleep through the same injected
    # ``sleep`` as the lock backoff and release the row before any timeout: turn it off.
    policy = make_policy(
        unique_name,
        window_rows=100,
        batch_rows=16,
        lock_timeout_ms=100,
        health={"busy_sleep_ratio": 0},
    )
    (target,) = plan_windows(db, request(policy))
    blocker = psycopg.connect(test_dsn)
    blocker.execute(f"SELECT 1 FROM public.{unique_name} WHERE id = 25 FOR UPDATE")  # noqa: S608
    sleeps: list[float] = []

    def release_on_first_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        blocker.rollback()

    try:
        result = delete_window(
            db, policy, target, batch_rows=16, dry_run=False, sleep=release_on_first_sleep
        )
    finally:
        blocker.close()
    assert result.rows_deleted == 40
    assert ids_left(db, unique_name) == []
    assert result.timeouts >= 5, "16 -> 8 -> 4 -> 2 -> 1 before the row is released"
    assert len(sleeps) == 1
    assert ledger(db, target.window_key)["timeouts"] == result.timeouts


def test_a_row_that_stays_locked_is_skipped_and_named_after_the_rest(
    db: Connection, unique_name: str, test_dsn: str
) -> None:
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 11)])
    policy = make_policy(unique_name, window_rows=100, batch_rows=4, lock_timeout_ms=50)
    (target,) = plan_windows(db, request(policy))
    with psycopg.connect(test_dsn) as blocker:
        blocker.execute(f"SELECT 1 FROM public.{unique_name} WHERE id = 6 FOR UPDATE")  # noqa: S608
        with pytest.raises(WindowDeleteError, match=r"were skipped: keys \[6\]"):
            delete_window(db, policy, target, batch_rows=4, dry_run=False, sleep=lambda _: None)
    assert ids_left(db, unique_name) == [6], "the rows after the locked one were deleted"
    row = ledger(db, target.window_key)
    assert (row["state"], row["rows_deleted"]) == ("failed", 9)
    assert "keys [6]" in row["last_error"]
    assert count_window(db, policy.table_spec, policy.timeouts, target) == 1


def test_row_updated_to_a_new_timestamp_is_kept(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(1, 1, old()), (2, 1, old())])
    policy = make_policy(unique_name)
    (target,) = plan_windows(db, request(policy))
    db.execute(f"UPDATE public.{unique_name} SET created_at = %s WHERE id = 2", (new(),))  # noqa: S608
    assert delete_window(db, policy, target, batch_rows=100, dry_run=False).rows_deleted == 1
    assert ids_left(db, unique_name) == [2]


@pytest.mark.parametrize("timestamp_type", ["timestamptz", "timestamp"])
def test_rows_at_the_cutoff_inside_a_window_are_kept(
    db: Connection, unique_name: str, timestamp_type: str
) -> None:
    create_table(db, unique_name, boundary_rows(CUTOFF), timestamp_type=timestamp_type)
    policy = make_policy(unique_name, window_rows=100, batch_rows=3)
    (window,) = plan_windows(db, request(policy))
    assert (window.first_id, window.last_id, window.expected_rows) == (1, 7, 4)
    result = delete_window(db, policy, window, batch_rows=3, dry_run=False)
    assert result.rows_deleted == 4
    assert ids_left(db, unique_name) == BOUNDARY_KEPT


def test_batches_converge_to_the_target_time_under_a_slow_trigger(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(i, 1, old(i)) for i in range(1, 4001)])
    db.execute(
        "CREATE FUNCTION pg_temp.slow_row() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN PERFORM pg_sleep(0.0005); RETURN OLD; END $$"
    )
    db.execute(
        f"CREATE TRIGGER slow BEFORE DELETE ON public.{unique_name} "
        "FOR EACH ROW EXECUTE FUNCTION pg_temp.slow_row()"
    )
    policy = make_policy(
        unique_name,
        window_rows=100_000,
        batch_rows=500,
        target_batch_ms=20,
        statement_timeout_ms=5000,
    )
    (window,) = plan_windows(db, request(policy))
    result = delete_window(db, policy, window, batch_rows=500, dry_run=False)
    assert result.rows_deleted == 4000
    # 0.5 ms a row and 20 ms a batch: about 40 rows a batch once converged (500 at first)
    assert result.batch_ms[0] > 200
    settled = sorted(result.batch_ms[20:-1])
    assert len(settled) >= 20
    assert 10 <= settled[len(settled) // 2] <= 40, settled
    assert ids_left(db, unique_name) == []
