"""Planning against the real Postgres: keyset windows, tenants, edge cases, immutability."""

from __future__ import annotations

import pytest

from retention.db.connection import Connection
from retention.rows.planner import PlanError, load_plan, plan_id_for, plan_windows
from tests.support.policies import make_policy
from tests.support.tables import CUTOFF, create_table, new, old, request


def covered(windows, tenant=None) -> list[tuple[int, int]]:
    return [(w.first_id, w.last_id) for w in windows if tenant is None or w.tenant == tenant]


def test_empty_table_plans_no_windows(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [])
    windows = plan_windows(db, request(make_policy(unique_name)))
    assert windows == []
    plan = load_plan(db, unique_name, "run-1")
    assert plan is not None
    assert plan[1] == []


def test_sparse_gapped_ids_give_windows_of_window_rows(db: Connection, unique_name: str) -> None:
    ids = [1, 2, 3, 50, 51, 1000, 1001, 1002, 99999, 10**12]
    create_table(db, unique_name, [(i, None, old()) for i in ids] + [(10**12 + 5, None, new())])
    policy = make_policy(unique_name, tenant_column=None, window_rows=3, batch_rows=2)
    windows = plan_windows(db, request(policy))
    assert covered(windows) == [(1, 3), (50, 1000), (1001, 99999), (10**12, 10**12)]
    assert [w.expected_rows for w in windows] == [3, 3, 3, 1]
    assert all(w.tenant_scope == "all" for w in windows)


def test_row_exactly_at_cutoff_is_not_eligible(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(1, 1, old()), (2, 1, CUTOFF), (3, 1, new())])
    windows = plan_windows(db, request(make_policy(unique_name)))
    assert covered(windows) == [(1, 1)]


def test_one_huge_tenant_gets_many_windows_small_ones_one(db: Connection, unique_name: str) -> None:
    rows = [(i, 1, old(i)) for i in range(1, 2501)]
    rows += [(3000 + i, 2 + i % 3, old(i)) for i in range(30)]
    rows += [(5000, None, old()), (5001, 9, new())]
    create_table(db, unique_name, rows)
    windows = plan_windows(db, request(make_policy(unique_name, window_rows=1000, batch_rows=100)))
    huge = [w for w in windows if w.tenant == "1"]
    assert [w.expected_rows for w in huge] == [1000, 1000, 500]
    assert covered(huge) == [(1, 1000), (1001, 2000), (2001, 2500)]
    for tenant in ("2", "3", "4"):
        assert [w.expected_rows for w in windows if w.tenant == tenant] == [10]
    assert [(w.tenant_scope, w.first_id) for w in windows if w.tenant is None] == [("null", 5000)]
    assert "9" not in {w.tenant for w in windows}, "tenant with only new rows needs no window"
    assert [w.window_no for w in windows] == list(range(len(windows)))


def test_plan_is_immutable_for_a_plan_id(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 101)])
    policy = make_policy(unique_name, window_rows=40, batch_rows=10)
    first = plan_windows(db, request(policy))
    db.execute(f"DELETE FROM public.{unique_name} WHERE id < 50")  # noqa: S608 - test-made name
    again = plan_windows(db, request(policy))
    assert again == first
    fresh = plan_windows(db, request(policy, plan_id="run-1@b"))
    assert covered(fresh) == [(50, 89), (90, 100)]
    assert load_plan(db, unique_name, "run-1")[0] == "run-1@b"


def test_plan_widens_windows_to_the_map_limit(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, i % 2, old()) for i in range(1, 201)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=10)
    windows = plan_windows(db, request(policy, max_windows=6))
    assert len(windows) <= 6
    assert sum(w.expected_rows for w in windows) == 200
    assert {w.tenant for w in windows} == {"0", "1"}


def test_too_many_tenants_plans_across_tenants(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, i, old()) for i in range(1, 21)])
    policy = make_policy(unique_name, window_rows=8, batch_rows=8)
    windows = plan_windows(db, request(policy, max_windows=5))
    assert covered(windows) == [(1, 8), (9, 16), (17, 20)]
    assert {w.tenant_scope for w in windows} == {"all"}


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (
            {"table": "public.no_such_table"},
            "field 'table': table public.no_such_table does not exist",
        ),
        ({"key_column": "nope"}, "field 'key_column': column 'nope' does not exist"),
        ({"tenant_column": "nope"}, "field 'tenant_column': column 'nope' does not exist"),
        ({"key_column": "payload"}, "windows need an integer key"),
        ({"timestamp_column": "tenant_id"}, "expected a timestamp"),
    ],
)
def test_policy_that_does_not_fit_the_table_is_named(
    db: Connection, unique_name: str, overrides: dict, words: str
) -> None:
    create_table(db, unique_name, [(1, 1, old())])
    with pytest.raises(PlanError, match=words):
        plan_windows(db, request(make_policy(unique_name, **overrides)))
    written = db.execute(
        "SELECT (SELECT count(*) FROM retention.runs WHERE policy = %(p)s) + "
        "(SELECT count(*) FROM retention.windows WHERE policy = %(p)s) AS n",
        {"p": unique_name},
    ).fetchone()
    assert written == {"n": 0}, "a plan that cannot be made writes nothing"


def test_rows_without_a_timestamp_are_never_eligible(db: Connection, unique_name: str) -> None:
    from tests.support.tables import ids_left

    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 6)])
    db.execute(f"ALTER TABLE public.{unique_name} ALTER COLUMN created_at DROP NOT NULL")
    db.execute(f"UPDATE public.{unique_name} SET created_at = NULL WHERE id IN (2, 4)")  # noqa: S608
    policy = make_policy(unique_name, window_rows=100, batch_rows=2)
    (window,) = plan_windows(db, request(policy))
    assert window.expected_rows == 3
    from retention.rows.deleter import delete_window

    delete_window(db, policy, window, batch_rows=2, dry_run=False)
    assert ids_left(db, unique_name) == [2, 4], "NULL is not older than any cutoff"


def test_a_table_without_a_timestamp_index_still_plans(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, 1, old() if i % 2 else new()) for i in range(1, 21)])
    for row in db.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
        (unique_name, "%(created_at)%"),
    ).fetchall():
        db.execute(f'DROP INDEX public."{row["indexname"]}"')
    windows = plan_windows(db, request(make_policy(unique_name, window_rows=100, batch_rows=5)))
    assert sum(w.expected_rows for w in windows) == 10


def test_plan_id_changes_with_the_dag_run_lifetime() -> None:
    assert plan_id_for("r", CUTOFF, None) == plan_id_for("r", CUTOFF, None)
    assert plan_id_for("r", CUTOFF, None) != plan_id_for("r", CUTOFF, CUTOFF)
    assert plan_id_for("r", CUTOFF, None).startswith("r@")


def test_window_per_tenant_off_plans_key_ranges_across_tenants(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(i, i % 3, old()) for i in range(1, 31)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5, window_per_tenant=False)
    windows = plan_windows(db, request(policy))
    assert covered(windows) == [(1, 10), (11, 20), (21, 30)]
    assert {w.label for w in windows} == {"ids 1–10", "ids 11–20", "ids 21–30"}
