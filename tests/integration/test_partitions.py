"""The partition fast path against real declarative partitioning in the real Postgres."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql

from retention.db.connection import Connection
from retention.evidence.reconcile import reconcile_run
from retention.rows.deleter import delete_window
from retention.rows.partitions import PartitionDropError, drop_expired_partitions
from retention.rows.planner import plan_windows
from tests.support.policies import make_policy, remote_policy
from tests.support.tables import CUTOFF, request

UTC = dt.UTC
MONTHS = [dt.datetime(2025, 12, 1, tzinfo=UTC), dt.datetime(2026, 1, 1, tzinfo=UTC)]
MONTHS += [dt.datetime(2026, 2, 1, tzinfo=UTC), CUTOFF, dt.datetime(2026, 4, 1, tzinfo=UTC)]


def partitioned(
    db: Connection,
    name: str,
    bounds: list[dt.datetime],
    *,
    default: bool = False,
    rows_per_day: int = 2,
) -> None:
    """public.<name> range-partitioned on created_at over ``bounds``; rows every 12 hours."""
    table = sql.Identifier("public", name)
    db.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(table))
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint NOT NULL, tenant_id integer, created_at timestamptz "
            "NOT NULL, payload text NOT NULL DEFAULT 'x', PRIMARY KEY (id, created_at)) "
            "PARTITION BY RANGE (created_at)"
        ).format(table)
    )
    for low, high in itertools.pairwise(bounds):
        part = sql.Identifier("public", f"{name}_{low:%Y%m%d}")
        db.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})").format(
                part, table, sql.Literal(low), sql.Literal(high)
            )
        )
    if default:
        db.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF {} DEFAULT").format(
                sql.Identifier("public", f"{name}_default"), table
            )
        )
    start = bounds[0] - (dt.timedelta(days=10) if default else dt.timedelta(0))
    db.execute(
        sql.SQL(
            "INSERT INTO {} (id, tenant_id, created_at) "
            "SELECT g, g %% 3, %(start)s + (g - 1) * %(step)s FROM generate_series(1, %(n)s) g"
        ).format(table),
        {
            "start": start,
            "step": dt.timedelta(hours=24 / rows_per_day),
            "n": int((bounds[-1] - start).days * rows_per_day),
        },
    )
    db.execute(sql.SQL("CREATE INDEX ON {} (created_at)").format(table))
    db.execute(sql.SQL("ANALYZE {}").format(table))


def children(db: Connection, name: str) -> list[str]:
    rows = db.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass ORDER BY c.relname",
        (f"public.{name}",),
    )
    return [r["relname"] for r in rows]


def exists(db: Connection, qualified: str) -> bool:
    return db.execute("SELECT to_regclass(%s) IS NOT NULL AS e", (qualified,)).fetchone()["e"]


def old_rows(db: Connection, name: str) -> int:
    return db.execute(
        sql.SQL("SELECT count(*) AS n FROM {} WHERE created_at < %s").format(
            sql.Identifier("public", name)
        ),
        (CUTOFF,),
    ).fetchone()["n"]


def all_rows(db: Connection, name: str) -> int:
    return db.execute(
        sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier("public", name))
    ).fetchone()["n"]


def evidence(db: Connection, policy: str) -> list[tuple[str, str, str]]:
    rows = db.execute(
        "SELECT partition_name, action, state FROM retention.partition_drops "
        "WHERE policy = %s ORDER BY partition_name",
        (policy,),
    )
    return [(r["partition_name"], r["action"], r["state"]) for r in rows]


def fast_path(db: Connection, policy, *, dry_run: bool = False) -> dict[str, Any]:
    return drop_expired_partitions(
        db, policy, "run-1", CUTOFF, column_type="timestamp with time zone", dry_run=dry_run
    )


def run_windows(db: Connection, policy) -> dict[str, Any]:
    for window in plan_windows(db, request(policy)):
        delete_window(db, policy, window, batch_rows=policy.batch_rows, dry_run=False)
    return reconcile_run(db, policy, "run-1")


def test_expired_partitions_are_detached_concurrently_and_dropped(
    db: Connection, unique_name: str
) -> None:
    partitioned(db, unique_name, MONTHS)
    young = all_rows(db, unique_name) - old_rows(db, unique_name)
    policy = make_policy(unique_name)
    result = fast_path(db, policy)
    gone = [f"public.{unique_name}_{m:%Y%m%d}" for m in MONTHS[:3]]
    assert [p["partition"] for p in result["dropped"]] == gone
    assert result["concurrently"] is True
    assert all(p["estimated_rows"] > 0 for p in result["dropped"])
    assert children(db, unique_name) == [f"{unique_name}_20260301"]
    assert not any(exists(db, g) for g in gone)
    assert evidence(db, unique_name) == [(g, "drop", "dropped") for g in gone]
    assert old_rows(db, unique_name) == 0
    assert all_rows(db, unique_name) == young, "the partition at the cutoff is untouched"
    summary = run_windows(db, policy)
    assert summary["status"] == "clean"
    assert [p["partition"] for p in summary["partitions"]] == gone


def test_detach_only_keeps_the_partitions_as_tables(db: Connection, unique_name: str) -> None:
    partitioned(db, unique_name, MONTHS)
    old = old_rows(db, unique_name)
    policy = make_policy(unique_name, partitions="detach_only")
    result = fast_path(db, policy)
    kept = [p["partition"] for p in result["detached"]]
    assert len(kept) == 3
    assert all(exists(db, k) for k in kept)
    assert children(db, unique_name) == [f"{unique_name}_20260301"]
    in_kept = sum(
        db.execute(sql.SQL("SELECT count(*) AS n FROM {}").format(sql.SQL(k))).fetchone()["n"]
        for k in kept
    )
    assert in_kept == old, "detached partitions keep every row"
    assert {state for _, _, state in evidence(db, unique_name)} == {"detached"}


def test_a_partition_that_straddles_the_cutoff_goes_through_the_windows(
    db: Connection, unique_name: str
) -> None:
    mid_feb = dt.datetime(2026, 2, 15, tzinfo=UTC)
    partitioned(
        db,
        unique_name,
        [dt.datetime(2026, 1, 15, tzinfo=UTC), mid_feb, CUTOFF + (mid_feb - MONTHS[2])],
    )
    policy = make_policy(unique_name)
    result = fast_path(db, policy)
    assert [p["partition"] for p in result["dropped"]] == [f"public.{unique_name}_20260115"]
    straddling_old = old_rows(db, unique_name)
    assert straddling_old > 0, "the straddling partition still holds old rows"
    summary = run_windows(db, policy)
    assert (summary["status"], summary["rows_deleted"]) == ("clean", straddling_old)
    assert old_rows(db, unique_name) == 0


def test_with_a_default_partition_the_detach_is_plain_and_the_default_goes_through_windows(
    db: Connection, unique_name: str
) -> None:
    partitioned(db, unique_name, MONTHS, default=True)
    policy = make_policy(unique_name)
    result = fast_path(db, policy)
    assert result["concurrently"] is False
    assert len(result["dropped"]) == 3
    assert f"{unique_name}_default" in children(db, unique_name)
    in_default = old_rows(db, unique_name)
    assert in_default == 20, "ten days of old rows live in the default partition"
    summary = run_windows(db, policy)
    assert (summary["status"], summary["rows_deleted"]) == ("clean", 20)


def test_a_dry_run_lists_what_would_go_and_detaches_nothing(
    db: Connection, unique_name: str
) -> None:
    partitioned(db, unique_name, MONTHS)
    before = all_rows(db, unique_name)
    result = fast_path(db, make_policy(unique_name), dry_run=True)
    assert [p["partition"] for p in result["would_go"]] == [
        f"public.{unique_name}_{m:%Y%m%d}" for m in MONTHS[:3]
    ]
    assert result["estimated_rows"] == pytest.approx(old_rows(db, unique_name), rel=0.05)
    assert len(children(db, unique_name)) == 4
    assert all_rows(db, unique_name) == before
    assert evidence(db, unique_name) == []


@contextmanager
def parent_locked(dsn: str, name: str, mode: str) -> Iterator[None]:
    conn = psycopg.connect(dsn, autocommit=True)
    try:
        conn.execute("BEGIN")
        conn.execute(
            sql.SQL("LOCK TABLE {} IN {} MODE").format(
                sql.Identifier("public", name), sql.SQL(mode)
            )
        )
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@pytest.mark.parametrize(("default", "mode"), [(False, "SHARE"), (True, "ACCESS SHARE")])
def test_a_lock_held_on_the_parent_fails_clearly_and_detaches_nothing(
    db: Connection, test_dsn: str, unique_name: str, default: bool, mode: str
) -> None:
    partitioned(db, unique_name, MONTHS, default=default)
    policy = make_policy(unique_name, lock_timeout_ms=200)
    before = children(db, unique_name)
    with parent_locked(test_dsn, unique_name, mode), pytest.raises(PartitionDropError) as failed:
        fast_path(db, policy)
    assert "within lock_timeout (200 ms): another session holds a lock" in str(failed.value)
    assert "Nothing was detached" in str(failed.value)
    assert children(db, unique_name) == before, "nothing half-detached"
    pending = db.execute(
        "SELECT count(*) AS n FROM pg_inherits WHERE inhparent = %s::regclass AND inhdetachpending",
        (f"public.{unique_name}",),
    ).fetchone()
    assert pending == {"n": 0}
    again = fast_path(db, policy)
    assert len(again["dropped"]) == 3, "a retry once the lock is gone finishes the job"


def test_a_drop_interrupted_after_the_detach_is_finished_by_the_next_attempt(
    db: Connection, unique_name: str
) -> None:
    partitioned(db, unique_name, MONTHS)
    policy = make_policy(unique_name)
    first = f"public.{unique_name}_20251201"
    db.execute(
        sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(
            sql.Identifier("public", unique_name), sql.SQL(first)
        )
    )
    db.execute(
        "INSERT INTO retention.partition_drops (policy, run_id, partition_name, bounds, "
        "estimated_rows, action, state) VALUES (%s, 'run-0', %s, 'b', 1, 'drop', 'detached')",
        (unique_name, first),
    )
    result = fast_path(db, policy)
    assert result["finished_from_earlier_attempts"] == [first]
    assert not exists(db, first)
    assert ("public." + f"{unique_name}_20251201", "drop", "dropped") in evidence(db, unique_name)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda n: make_policy(n, partitions="rows"), "partitions: rows"),
        (remote_policy, "remote policy"),
    ],
)
def test_policies_that_never_take_the_fast_path(
    db: Connection, unique_name: str, make: Any, words: str
) -> None:
    partitioned(db, unique_name, MONTHS)
    assert words in fast_path(db, make(unique_name))["skipped"]
    assert len(children(db, unique_name)) == 4


def test_a_table_that_is_not_partitioned_by_the_timestamp_is_left_alone(
    db: Connection, unique_name: str
) -> None:
    db.execute(
        f"CREATE TABLE public.{unique_name} (id bigint, tenant_id int, created_at timestamptz, "
        "payload text) PARTITION BY RANGE (id)"
    )
    assert "not by range of created_at alone" in fast_path(db, make_policy(unique_name))["skipped"]
    db.execute(f"DROP TABLE public.{unique_name}")
    db.execute(f"CREATE TABLE public.{unique_name} (id bigint, created_at timestamptz)")
    assert fast_path(db, make_policy(unique_name))["skipped"] == "not partitioned"
