"""Planning against the real Postgres: index probes, estimates, tenants, edge cases, immutability.

Window boundaries come from estimates, so these tests check what a plan must
guarantee (every eligible key in exactly one window of its scope, windows
contiguous and starting on real keys, no heap walk) rather than exact cuts.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from dataclasses import replace

import pytest
from psycopg import sql

from devtools.plans import CUTOFF, request
from retention.db.connection import Connection
from retention.evidence.reconcile import reconcile_run
from retention.rows import probes
from retention.rows.deleter import delete_window
from retention.rows.planner import (
    PlanError,
    load_plan,
    plan_id_for,
    plan_windows,
    record_plan,
)
from retention.rows.windows import Window
from tests.support.policies import make_policy
from tests.support.tables import create_table, ids_left, new, old


def covered(windows, tenant=None) -> list[tuple[int, int]]:
    return [(w.first_id, w.last_id) for w in windows if tenant is None or w.tenant == tenant]


def eligible_keys(db: Connection, name: str, tenant: object = "any") -> list[int]:
    table = sql.Identifier("public", name)
    where = sql.SQL("TRUE") if tenant == "any" else sql.SQL("tenant_id IS NOT DISTINCT FROM %(t)s")
    rows = db.execute(
        sql.SQL("SELECT id FROM {} WHERE created_at < %(c)s AND {} ORDER BY id").format(
            table, where
        ),
        {"c": CUTOFF, "t": tenant},
    )
    return [r["id"] for r in rows]


def assert_covers(db: Connection, name: str, windows: list[Window], tenant: object = "any") -> None:
    """Contiguous windows starting on the first eligible key, every eligible key inside one."""
    ranges = covered(windows, None if tenant == "any" else str(tenant))
    keys = eligible_keys(db, name, tenant)
    assert ranges, "eligible rows need at least one window"
    assert ranges[0][0] == keys[0]
    for (_, last), (first, _) in itertools.pairwise(ranges):
        assert first == last + 1, f"windows must be contiguous: {ranges}"
    assert all(first <= last for first, last in ranges)
    assert keys[-1] <= ranges[-1][1], f"eligible key {keys[-1]} is past the last window"


def heap_reads(db: Connection, name: str) -> int:
    """Rows the table has handed out so far (sequential and index fetches), flushed now."""
    db.execute("SELECT pg_stat_force_next_flush()")
    db.execute("SELECT pg_stat_clear_snapshot()")
    row = db.execute(
        "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS n "
        "FROM pg_stat_user_tables WHERE relid = %s::regclass",
        (f"public.{name}",),
    ).fetchone()
    return int(row["n"])


def bulk_table(
    db: Connection, name: str, rows: int, old_rows: int, *, shuffle: bool = False
) -> None:
    """public.<name> with ``rows`` rows, the first ``old_rows`` keys eligible (or, shuffled,
    ``old_rows`` eligible rows at random keys); indexes as recommended; analyzed."""
    table = sql.Identifier("public", name)
    db.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, tenant_id integer, "
            "created_at timestamptz NOT NULL, payload text NOT NULL DEFAULT 'x')"
        ).format(table)
    )
    order = "random()" if shuffle else "g"
    db.execute("SELECT setseed(0.42)")  # the same shuffle every run
    db.execute(
        sql.SQL(
            "INSERT INTO {} (id, tenant_id, created_at) "
            "SELECT g, g %% 20, CASE WHEN rank <= %(old)s "
            "THEN %(c)s - interval '1 day' - (%(old)s - rank) * interval '1 second' "
            "ELSE %(c)s + rank * interval '1 second' END "
            "FROM (SELECT g, row_number() OVER (ORDER BY {}) AS rank "
            "FROM generate_series(1, %(rows)s) AS g) AS numbered"
        ).format(table, sql.SQL(order)),
        {"old": old_rows, "rows": rows, "c": CUTOFF},
    )
    db.execute(sql.SQL("CREATE INDEX ON {} (tenant_id, id)").format(table))
    db.execute(sql.SQL("CREATE INDEX ON {} (created_at)").format(table))
    db.execute(sql.SQL("VACUUM ANALYZE {}").format(table))


def test_empty_table_plans_no_windows(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [])
    windows = plan_windows(db, request(make_policy(unique_name)))
    assert windows == []
    plan = load_plan(db, unique_name, "run-1")
    assert plan is not None
    assert plan[1] == []


def test_sparse_gapped_ids_are_covered_and_windows_start_on_real_keys(
    db: Connection, unique_name: str
) -> None:
    ids = [1, 2, 3, 50, 51, 1000, 1001, 1002, 99999, 10**12]
    create_table(db, unique_name, [(i, None, old()) for i in ids] + [(10**12 + 5, None, new())])
    policy = make_policy(unique_name, tenant_column=None, window_rows=3, batch_rows=2)
    windows = plan_windows(db, request(policy))
    assert_covers(db, unique_name, windows)
    assert 3 <= len(windows) <= 5, "about 10 eligible rows at 3 per window (an estimate)"
    assert {w.first_id for w in windows} <= set(ids), "no window starts in an empty stretch"
    assert windows[-1].last_id == 10**12, "the young row after the last eligible one is left out"
    assert all(w.tenant_scope == "all" for w in windows)
    assert sum(w.expected_rows for w in windows) == pytest.approx(10, abs=2)


def test_row_exactly_at_cutoff_is_not_eligible(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(1, 1, old()), (2, 1, CUTOFF), (3, 1, new())])
    windows = plan_windows(db, request(make_policy(unique_name)))
    assert covered(windows) == [(1, 1)]


def test_per_tenant_windows_give_a_huge_tenant_many_and_small_ones_one(
    db: Connection, unique_name: str
) -> None:
    rows = [(i, 1, old(i)) for i in range(1, 2501)]
    rows += [(3000 + i, 2 + i % 3, old(i)) for i in range(30)]
    rows += [(5000, None, old()), (5001, 9, new())]
    create_table(db, unique_name, rows)
    policy = make_policy(unique_name, window_rows=1000, batch_rows=100, window_per_tenant=True)
    windows = plan_windows(db, request(policy))
    huge = [w for w in windows if w.tenant == "1"]
    assert len(huge) >= 3
    assert_covers(db, unique_name, windows, tenant=1)
    for tenant in (2, 3, 4):
        assert len([w for w in windows if w.tenant == str(tenant)]) == 1
        assert_covers(db, unique_name, windows, tenant=tenant)
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
    assert fresh[0].first_id == 50
    assert_covers(db, unique_name, fresh)
    assert load_plan(db, unique_name, "run-1")[0] == "run-1@b"


def test_plan_widens_windows_to_the_map_limit(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, i % 2, old()) for i in range(1, 201)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=10, window_per_tenant=True)
    windows = plan_windows(db, request(policy, max_windows=6))
    assert len(windows) <= 6
    assert {w.tenant for w in windows} == {"0", "1"}
    for tenant in (0, 1):
        assert_covers(db, unique_name, windows, tenant=tenant)


def test_too_many_tenants_plans_across_tenants(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, i, old()) for i in range(1, 21)])
    policy = make_policy(unique_name, window_rows=8, batch_rows=8, window_per_tenant=True)
    windows = plan_windows(db, request(policy, max_windows=5))
    assert {w.tenant_scope for w in windows} == {"all"}
    assert_covers(db, unique_name, windows)


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
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 6)])
    db.execute(f"ALTER TABLE public.{unique_name} ALTER COLUMN created_at DROP NOT NULL")
    db.execute(f"UPDATE public.{unique_name} SET created_at = NULL WHERE id IN (2, 4)")  # noqa: S608
    policy = make_policy(unique_name, window_rows=100, batch_rows=2)
    (window,) = plan_windows(db, request(policy))
    delete_window(db, policy, window, batch_rows=2, dry_run=False)
    assert ids_left(db, unique_name) == [2, 4], "NULL is not older than any cutoff"


def test_a_table_without_a_timestamp_index_plans_the_whole_key_range_and_says_so(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(i, 1, old() if i % 2 else new()) for i in range(1, 21)])
    for row in db.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
        (unique_name, "%(created_at)%"),
    ).fetchall():
        db.execute(f'DROP INDEX public."{row["indexname"]}"')
    policy = make_policy(unique_name, window_rows=100, batch_rows=5)
    windows = plan_windows(db, request(policy))
    assert covered(windows) == [(1, 20)], "without the index the range runs to the last key"
    notes = db.execute(
        "SELECT plan_notes FROM retention.runs WHERE policy = %s", (unique_name,)
    ).fetchone()["plan_notes"]
    assert notes == ["no index on created_at: windows cover the whole key range up to 20"]
    delete_window(db, policy, windows[0], batch_rows=5, dry_run=False)
    assert ids_left(db, unique_name) == list(range(2, 21, 2))


def test_plan_id_changes_with_the_dag_run_lifetime() -> None:
    assert plan_id_for("r", CUTOFF, None) == plan_id_for("r", CUTOFF, None)
    assert plan_id_for("r", CUTOFF, None) != plan_id_for("r", CUTOFF, CUTOFF)
    assert plan_id_for("r", CUTOFF, None).startswith("r@")


def test_key_ranges_across_tenants_are_the_default(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(i, i % 3, old()) for i in range(1, 31)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5)
    assert policy.window_per_tenant is False
    windows = plan_windows(db, request(policy))
    assert {w.tenant_scope for w in windows} == {"all"}
    assert 2 <= len(windows) <= 4
    assert_covers(db, unique_name, windows)
    assert windows[0].label == f"ids 1–{windows[0].last_id}"


def delete_all(db: Connection, policy, windows: list[Window]) -> None:
    for window in windows:
        delete_window(db, policy, window, batch_rows=policy.batch_rows, dry_run=False)


def test_planning_reads_a_small_fraction_of_the_eligible_rows(
    db: Connection, unique_name: str
) -> None:
    bulk_table(db, unique_name, rows=200_000, old_rows=100_000)
    before = heap_reads(db, unique_name)
    policy = make_policy(unique_name, window_rows=10_000, batch_rows=1000)
    windows = plan_windows(db, request(policy))
    read = heap_reads(db, unique_name) - before
    assert read < 15_000, f"planning read {read} rows of a table with 100,000 eligible"
    assert 8 <= len(windows) <= 12
    assert_covers(db, unique_name, windows)
    assert windows[-1].last_id == 100_000, "the range ends at the newest eligible key"
    assert sum(w.expected_rows for w in windows) == pytest.approx(100_000, rel=0.1)


def test_per_tenant_planning_reads_a_small_fraction_of_the_eligible_rows_too(
    db: Connection, unique_name: str
) -> None:
    bulk_table(db, unique_name, rows=200_000, old_rows=100_000)
    before = heap_reads(db, unique_name)
    policy = make_policy(unique_name, window_rows=10_000, window_per_tenant=True)
    windows = plan_windows(db, request(policy))
    read = heap_reads(db, unique_name) - before
    assert read < 15_000, f"per-tenant planning read {read} rows (100,000 eligible, 20 tenants)"
    assert {w.tenant for w in windows} == {str(t) for t in range(20)}
    for tenant in range(20):
        assert_covers(db, unique_name, windows, tenant=tenant)


def test_keys_out_of_time_order_near_the_end_are_found_by_the_tail_probe(
    db: Connection, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probes, "NEWEST_SAMPLE_ROWS", 10)
    rows = [(i, 1, old(1000 - i)) for i in range(1, 1001)]
    rows += [(i, 1, new(i)) for i in range(1001, 2001) if i not in (1200, 1700)]
    rows += [(1200, 1, old(5000)), (1700, 1, old(5000))]  # late commits of old rows
    create_table(db, unique_name, rows)
    policy = make_policy(unique_name, window_rows=400, batch_rows=100)
    windows = plan_windows(db, request(policy))
    assert windows[-1].last_id == 1700
    assert_covers(db, unique_name, windows)
    delete_all(db, policy, windows)
    assert eligible_keys(db, unique_name) == []


def test_keys_uncorrelated_with_time_plan_the_whole_key_range(
    db: Connection, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probes, "NEWEST_SAMPLE_ROWS", 1)
    monkeypatch.setattr(probes, "TAIL_PROBE_ROWS", 50)
    bulk_table(db, unique_name, rows=5_000, old_rows=2_500, shuffle=True)
    policy = make_policy(unique_name, window_rows=500, batch_rows=100)
    windows = plan_windows(db, request(policy))
    assert windows[-1].last_id == 5_000
    notes = db.execute(
        "SELECT plan_notes FROM retention.runs WHERE policy = %s", (unique_name,)
    ).fetchone()["plan_notes"]
    assert len(notes) == 1
    assert "do not follow created_at" in notes[0]
    assert_covers(db, unique_name, windows)
    delete_all(db, policy, windows)
    assert eligible_keys(db, unique_name) == []
    assert len(ids_left(db, unique_name)) == 2_500


def test_an_old_row_far_past_the_probes_is_reported_and_the_next_run_reaches_it(
    db: Connection, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probes, "TAIL_PROBE_ROWS", 100)
    rows = [(i, 1, old(1000 - i)) for i in range(1, 1001)]
    rows += [(i, 1, new(i)) for i in range(1001, 3001) if i != 2500]
    rows += [(2500, 1, old(9000))]  # back-filled: an old timestamp on a new key
    create_table(db, unique_name, rows)
    policy = make_policy(unique_name, window_rows=400)
    windows = plan_windows(db, request(policy))
    assert windows[-1].last_id == 1000
    delete_all(db, policy, windows)
    summary = reconcile_run(db, policy, "run-1")
    assert (summary["status"], summary["rows_outside_windows"]) == ("dirty", 1)
    again = plan_windows(db, request(policy, run_id="run-2"))
    assert again[-1].last_id == 3000, "the next run plans the whole key range"
    notes = db.execute(
        "SELECT plan_notes FROM retention.runs WHERE policy = %s AND run_id = 'run-2'",
        (unique_name,),
    ).fetchone()["plan_notes"]
    assert notes == [
        "the last run found 1 old row(s) outside its windows: windows cover the key range "
        "up to 3000"
    ]
    delete_all(db, policy, again)
    assert reconcile_run(db, policy, "run-2")["status"] == "clean"
    again_clean = plan_windows(db, request(policy, run_id="run-3"))
    assert again_clean == [], "nothing old is left to plan"


def test_one_tenant_with_95_percent_of_the_rows_gets_no_special_treatment_by_default(
    db: Connection, unique_name: str
) -> None:
    rng = random.Random(7)
    rows = [(i, 1 if rng.random() < 0.95 else rng.randint(2, 20), old(i)) for i in range(1, 4001)]
    rows += [(i, 1, new(i)) for i in range(4001, 4501)]
    create_table(db, unique_name, rows)
    policy = make_policy(unique_name, window_rows=1000, batch_rows=200)
    windows = plan_windows(db, request(policy))
    assert {w.tenant_scope for w in windows} == {"all"}
    assert 3 <= len(windows) <= 5
    assert_covers(db, unique_name, windows)
    delete_all(db, policy, windows)
    assert ids_left(db, unique_name) == list(range(4001, 4501))


def seed_history(
    db: Connection, policy: str, rows: int, seconds: float, paused: float = 0.0, no: int = 0
) -> None:
    """A finished window of an earlier run: the rate the planner sizes windows by."""
    db.execute(
        "INSERT INTO retention.windows (window_key, policy, run_id, plan_id, window_no, "
        "tenant_scope, cutoff, first_id, last_id, expected_rows, state, rows_deleted, seconds, "
        "paused_seconds, finished_at) VALUES (%(k)s, %(p)s, 'earlier', 'earlier@x', %(no)s, "
        "'all', %(c)s, 1, 2, %(n)s, 'done', %(n)s, %(s)s, %(paused)s, now())",
        {
            "k": f"{policy}:earlier@x:w{no:04d}",
            "p": policy,
            "c": CUTOFF,
            "n": rows,
            "s": seconds,
            "paused": paused,
            "no": no,
        },
    )


def test_windows_are_sized_by_time_from_the_measured_rate(db: Connection, unique_name: str) -> None:
    bulk_table(db, unique_name, rows=12_000, old_rows=6_000)
    policy = make_policy(unique_name, window_rows=None, target_window_seconds=0.5)
    first = plan_windows(db, request(policy, window_rows=None))
    assert len(first) == 1, "before any history: 20,000 rows/s × 0.5 s holds all 6,000 rows"
    # 1,000 rows/s while working; the 590 s it waited paused do not count
    seed_history(db, unique_name, rows=10_000, seconds=600.0, paused=590.0)
    sized = plan_windows(db, request(policy, window_rows=None, plan_id="run-1@b"))
    assert 10 <= len(sized) <= 14, "6,000 rows at 1,000 rows/s, 0.5 s each: about 12"
    assert_covers(db, unique_name, sized)
    recorded = db.execute(
        "SELECT window_rows FROM retention.runs WHERE policy = %s", (unique_name,)
    ).fetchone()
    assert recorded == {"window_rows": 500}


def test_a_plan_keeps_the_pool_slots_busy(db: Connection, unique_name: str) -> None:
    bulk_table(db, unique_name, rows=4_000, old_rows=2_000)
    policy = make_policy(unique_name, window_rows=100_000, batch_rows=100)
    assert len(plan_windows(db, request(policy))) == 1
    windows = plan_windows(db, request(policy, plan_id="run-1@b", min_windows=4))
    assert len(windows) == 4
    assert_covers(db, unique_name, windows)
    assert all(400 <= w.expected_rows <= 600 for w in windows)


def test_planning_a_scope_with_only_young_rows_makes_no_window(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(i, 1, new(i)) for i in range(1, 50)])
    assert plan_windows(db, request(make_policy(unique_name))) == []


def test_cutoffs_between_eligible_rows(db: Connection, unique_name: str) -> None:
    moment = CUTOFF - dt.timedelta(microseconds=1)
    create_table(db, unique_name, [(1, 1, moment), (2, 1, CUTOFF), (3, 1, moment)])
    windows = plan_windows(db, request(make_policy(unique_name)))
    assert covered(windows) == [(1, 3)]


def test_a_second_planner_of_the_same_run_adds_no_window_to_the_first_ones_plan(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 101)])
    policy = make_policy(unique_name, window_rows=50, batch_rows=10)
    first = plan_windows(db, request(policy))
    other = [replace(w, window_no=w.window_no + 10, first_id=w.first_id + 1) for w in first]
    record_plan(db, request(policy), other, 0.1, 50, [])  # a concurrent planner, same plan id
    assert load_plan(db, unique_name, "run-1")[1] == first
