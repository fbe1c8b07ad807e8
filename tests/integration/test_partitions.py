"""The partition fast path against real declarative partitioning in the real Postgres."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import psycopg
import pytest
from psycopg import sql

from devtools.plans import CUTOFF, request
from retention.db.connection import Connection, connect_dsn
from retention.db.migrate import migrate
from retention.evidence.reconcile import RetentionIncomplete, raise_if_dirty, reconcile_run
from retention.holds.store import lift_hold, place_hold
from retention.rows import partitions
from retention.rows.deleter import delete_window
from retention.rows.partitions import PartitionDropError, drop_expired_partitions
from retention.rows.planner import plan_windows
from tests.support.policies import make_policy, remote_policy

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
    analyse: bool = True,
) -> None:
    """public.<name> range-partitioned on created_at over ``bounds``; rows every 12 hours
    (analysed, as autovacuum would, unless ``analyse`` is False: then the indexes are built
    before the rows arrive, since building one records a row count, and autovacuum is off
    for the partitions, so that their statistics stay empty)."""
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
            sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}) TO ({}){}").format(
                part,
                table,
                sql.Literal(low),
                sql.Literal(high),
                sql.SQL("" if analyse else " WITH (autovacuum_enabled = false)"),
            )
        )
    if not analyse:
        db.execute(sql.SQL("CREATE INDEX ON {} (created_at)").format(table))
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
    if analyse:
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


def fast_path(
    db: Connection,
    policy,
    *,
    dry_run: bool = False,
    run_id: str = "run-1",
    cutoff: dt.datetime = CUTOFF,
    column_type: str = "timestamp with time zone",
) -> dict[str, Any]:
    return drop_expired_partitions(
        db, policy, run_id, cutoff, column_type=column_type, dry_run=dry_run
    )


def run_windows(
    db: Connection, policy, *, run_id: str = "run-1", cutoff: dt.datetime = CUTOFF
) -> dict[str, Any]:
    for window in plan_windows(db, request(policy, run_id, cutoff=cutoff)):
        delete_window(db, policy, window, batch_rows=policy.batch_rows, dry_run=False)
    return reconcile_run(db, policy, run_id)


def reconcile_after_plan(db: Connection, policy, run_id: str) -> dict[str, Any]:
    """Plan and reconcile a run whose windows delete nothing (its table is clean)."""
    plan_windows(db, request(policy, run_id))
    return reconcile_run(db, policy, run_id)


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


def test_a_partition_with_one_held_row_is_not_dropped(db: Connection, unique_name: str) -> None:
    """A legal hold on one row keeps its partition attached: the row path deletes the
    partition's other rows and keeps the held one; the run is clean with it held."""
    partitioned(db, unique_name, MONTHS)
    place_hold(db, policy=unique_name, match="key", value="70", reason="case", placed_by="ann")
    policy = make_policy(unique_name)
    result = fast_path(db, policy)
    january = f"public.{unique_name}_20260101"  # rows every 12 hours from Dec 1: id 70 is Jan 4
    assert january not in [p["partition"] for p in result["dropped"]]
    assert len(result["dropped"]) == 2
    (left,) = result["left_to_rows"]
    assert (left["partition"], "legal hold" in left["why"]) == (january, True)
    assert exists(db, january)
    summary = run_windows(db, policy)
    assert (summary["status"], summary["rows_held"]) == ("clean", 1)
    assert old_rows(db, unique_name) == 1


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


def oid_of(db: Connection, qualified: str) -> int:
    return int(db.execute("SELECT %s::regclass::oid AS o", (qualified,)).fetchone()["o"])


def detach_by_hand(db: Connection, name: str, partition: str) -> None:
    db.execute(
        sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(
            sql.Identifier("public", name), sql.SQL(partition)
        )
    )


def detached_by_an_earlier_attempt(db: Connection, name: str) -> tuple[Any, str, int]:
    """The monthly table ``name`` whose first partition an earlier attempt detached (and
    recorded ``detached`` with its oid) but did not drop: the policy, that partition, its oid."""
    partitioned(db, name, MONTHS)
    first = f"public.{name}_20251201"
    oid = oid_of(db, first)
    detach_by_hand(db, name, first)
    record(db, name, first, "detached", oid=oid)
    return make_policy(name), first, oid


def record(
    db: Connection,
    policy: str,
    partition: str,
    state: str,
    *,
    oid: int | None,
    run_id: str = "run-0",
    action: str = "drop",
) -> None:
    """An earlier attempt's evidence, as the fast path writes it (with the table's oid
    where the schema records one)."""
    values = {
        "policy": policy,
        "run_id": run_id,
        "partition_name": partition,
        "bounds": "b",
        "estimated_rows": 1,
        "action": action,
        "state": state,
    }
    has_oid = db.execute(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = "
        "'retention' AND table_name = 'partition_drops' AND column_name = 'table_oid') AS e"
    ).fetchone()["e"]
    if has_oid:
        values["table_oid"] = oid
    db.execute(
        sql.SQL("INSERT INTO retention.partition_drops ({}) VALUES ({})").format(
            sql.SQL(", ").join(map(sql.Identifier, values)),
            sql.SQL(", ").join(map(sql.Placeholder, values)),
        ),
        values,
    )


def drop_record(db: Connection, policy: str, partition: str, run_id: str = "run-0") -> dict:
    row = db.execute(
        "SELECT * FROM retention.partition_drops "
        "WHERE policy = %s AND run_id = %s AND partition_name = %s",
        (policy, run_id, partition),
    ).fetchone()
    assert row is not None
    return row


def test_a_drop_interrupted_after_the_detach_is_finished_by_the_next_attempt(
    db: Connection, unique_name: str
) -> None:
    policy, first, _oid = detached_by_an_earlier_attempt(db, unique_name)
    result = fast_path(db, policy)
    assert result["finished_from_earlier_attempts"] == [
        {"partition": first, "run_id": "run-0", "state": "dropped"}
    ]
    assert not exists(db, first)
    finished = drop_record(db, unique_name, first)
    assert (finished["state"], finished["resolved_by_run"]) == ("dropped", "run-1")


def test_finishing_a_drop_never_drops_another_table_that_took_the_name(
    db: Connection, unique_name: str
) -> None:
    """Invariant: only the very table that was detached is ever dropped."""
    policy, first, _oid = detached_by_an_earlier_attempt(db, unique_name)
    db.execute(
        sql.SQL("ALTER TABLE {} RENAME TO {}").format(
            sql.SQL(first), sql.Identifier(f"{unique_name}_kept")
        )
    )
    db.execute(sql.SQL("CREATE TABLE {} (note text)").format(sql.SQL(first)))
    db.execute(sql.SQL("INSERT INTO {} VALUES ('someone else''s table')").format(sql.SQL(first)))
    result = fast_path(db, policy)
    assert exists(db, first), "the new table with the old name is left alone"
    assert all_rows(db, first.split(".")[1]) == 1
    assert exists(db, f"public.{unique_name}_kept"), "the renamed table is left for a person"
    [finished] = result["finished_from_earlier_attempts"]
    assert finished["state"] == "abandoned"
    assert f"{first} now names a different table" in finished["reason"]
    assert f"the table detached is now public.{unique_name}_kept" in finished["reason"]
    assert drop_record(db, unique_name, first)["state"] == "abandoned"
    summary = run_windows(db, policy)
    assert summary["status"] == "dirty", "the run that gives a drop up says so"
    assert summary["rows_remaining"] == 0
    [problem] = summary["partition_problems"]
    assert problem.startswith(f"{first}: its drop was abandoned: {first} now names a different")
    with pytest.raises(RetentionIncomplete, match=r"Partitions: .*its drop was abandoned"):
        raise_if_dirty(summary)
    assert fast_path(db, policy, run_id="run-2")["finished_from_earlier_attempts"] == []
    later = run_windows(db, policy, run_id="run-2")
    assert later["status"] == "dirty", "the table given up still holds old rows outside"
    [problem] = later["partition_problems"]
    assert problem.startswith(f"{first}: its drop was abandoned: {first} now names a different")
    assert f"public.{unique_name}_kept still exists" in problem
    db.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier("public", f"{unique_name}_kept")))
    fast_path(db, policy, run_id="run-3")
    assert run_windows(db, policy, run_id="run-3")["status"] == "clean", "once it is gone"


@pytest.mark.parametrize("where", ["the same table", "another table"])
def test_finishing_a_drop_never_drops_a_table_attached_again(
    db: Connection, unique_name: str, where: str
) -> None:
    policy, first, oid = detached_by_an_earlier_attempt(db, unique_name)
    parent = unique_name
    if where == "another table":
        parent = f"{unique_name}_archive"
        db.execute(
            sql.SQL("CREATE TABLE {} (LIKE {}) PARTITION BY RANGE (created_at)").format(
                sql.Identifier("public", parent), sql.Identifier("public", unique_name)
            )
        )
    db.execute(
        sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})").format(
            sql.Identifier("public", parent),
            sql.SQL(first),
            sql.Literal(MONTHS[0]),
            sql.Literal(MONTHS[1]),
        )
    )
    result = fast_path(db, policy)
    if where == "another table":
        assert oid_of(db, first) == oid, "not dropped"
    else:  # attached again and expired: listed afresh, under this run's own record
        assert first in [p["partition"] for p in result["dropped"]]
        assert drop_record(db, unique_name, first, "run-1")["table_oid"] == oid
    [finished] = result["finished_from_earlier_attempts"]
    assert finished["state"] == "abandoned", "the finishing pass never drops a partition"
    assert f"is a partition of public.{parent}" in finished["reason"]
    fast_path(db, policy, run_id="run-2")
    later = run_windows(db, policy, run_id="run-2")
    assert later["status"] == "clean", "attached again: its rows are counted, or it is gone"


def test_a_view_on_a_detached_partition_does_not_stop_later_runs(
    db: Connection, unique_name: str
) -> None:
    policy, first, _oid = detached_by_an_earlier_attempt(db, unique_name)
    db.execute(
        sql.SQL("CREATE VIEW {} AS SELECT * FROM {}").format(
            sql.Identifier("public", f"{unique_name}_v"), sql.SQL(first)
        )
    )
    result = fast_path(db, policy)  # raised DependentObjectsStillExist before
    [finished] = result["finished_from_earlier_attempts"]
    assert finished["state"] == "detached"
    assert "DependentObjectsStillExist" in finished["error"]
    assert f"(view {unique_name}_v depends on table {unique_name}_20251201)" in finished["error"]
    assert len(result["dropped"]) == 2, "the other expired partitions still go"
    stuck = drop_record(db, unique_name, first)
    assert (stuck["state"], stuck["drop_attempts"]) == ("detached", 1)
    summary = run_windows(db, policy)
    assert summary["rows_remaining"] == 0, "the windows ran"
    assert summary["status"] == "dirty", "a detached partition still holds its old rows"
    [stranded] = summary["partitions_stranded"]
    assert (stranded["partition"], stranded["run_id"]) == (first, "run-0")
    [problem] = summary["partition_problems"]
    assert problem.startswith(f"{first} is detached, not dropped (run run-0): ")
    db.execute(sql.SQL("DROP VIEW {}").format(sql.Identifier("public", f"{unique_name}_v")))
    again = fast_path(db, policy, run_id="run-2")
    assert again["finished_from_earlier_attempts"][0]["state"] == "dropped"
    assert run_windows(db, policy, run_id="run-2")["status"] == "clean"


@pytest.mark.parametrize("dependent", ["view", "foreign key", "publication"])
def test_a_partition_something_depends_on_is_left_to_the_row_path(
    db: Connection, unique_name: str, dependent: str
) -> None:
    partitioned(db, unique_name, MONTHS)
    policy = make_policy(unique_name)
    first = f"public.{unique_name}_20251201"
    other = sql.Identifier(f"{unique_name}_dep")
    if dependent == "view":
        db.execute(sql.SQL("CREATE VIEW {} AS SELECT * FROM {}").format(other, sql.SQL(first)))
        found = f"view public.{unique_name}_dep"
    elif dependent == "foreign key":
        db.execute(
            sql.SQL(
                "CREATE TABLE {} (id bigint, created_at timestamptz, "
                "FOREIGN KEY (id, created_at) REFERENCES {} ON DELETE CASCADE)"
            ).format(other, sql.Identifier("public", unique_name))
        )
        found = f"foreign key {unique_name}_dep_id_created_at_fkey of public.{unique_name}_dep"
    else:
        db.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                other, sql.Identifier("public", unique_name)
            )
        )
        found = f"publication {unique_name}_dep"
    try:
        old = old_rows(db, unique_name)
        result = fast_path(db, policy)
        went = [p["partition"] for p in result["dropped"]]
        if dependent == "view":  # on the partition itself: the others go
            assert went == [f"public.{unique_name}_20260101", f"public.{unique_name}_20260201"]
        else:  # on the parent: every partition is tied to it
            assert went == []
        left = {p["partition"]: p["why"] for p in result["left_to_rows"]}
        assert found in left[first]
        assert exists(db, first)
        assert f"{unique_name}_20251201" in children(db, unique_name), "still attached"
        assert drop_record(db, unique_name, first, "run-1")["state"] == "left"
        summary = run_windows(db, policy)
        assert summary["status"] == "clean"
        assert old > 0
        assert summary["rows_deleted"] > 0
        assert old_rows(db, unique_name) == 0, "the row path deleted its rows"
        [mine] = [p for p in summary["partitions"] if p["partition"] == first]
        assert (mine["action"], mine["state"]) == ("rows", "left")
        assert found in mine["reason"]
    finally:
        if dependent == "publication":
            db.execute(sql.SQL("DROP PUBLICATION {}").format(other))


def test_a_detach_whose_record_was_never_moved_on_is_found_and_dropped(
    db: Connection, unique_name: str
) -> None:
    """DETACH … CONCURRENTLY commits on its own; a task that dies right after it leaves
    the record 'started'. The next attempt finds the table detached and drops it."""
    partitioned(db, unique_name, MONTHS[2:])  # one expired partition: February
    policy = make_policy(unique_name)
    first = f"public.{unique_name}_20260201"
    record(db, unique_name, first, "started", oid=oid_of(db, first))
    db.execute(
        sql.SQL("ALTER TABLE {} DETACH PARTITION {} CONCURRENTLY").format(
            sql.Identifier("public", unique_name), sql.SQL(first)
        )
    )
    summary_before = reconcile_after_plan(db, policy, "run-0")
    assert summary_before["rows_remaining"] == 0, "the table itself holds no old row"
    assert summary_before["status"] == "dirty", "stranded rows never read as clean"
    assert summary_before["partitions_stranded"][0]["partition"] == first
    result = fast_path(db, policy)
    assert result["finished_from_earlier_attempts"] == [
        {"partition": first, "run_id": "run-0", "state": "dropped"}
    ]
    assert not exists(db, first)
    assert run_windows(db, policy)["status"] == "clean"


def test_a_started_record_whose_partition_is_still_attached_is_closed_and_listed_again(
    db: Connection, unique_name: str
) -> None:
    partitioned(db, unique_name, MONTHS)
    policy = make_policy(unique_name)
    first = f"public.{unique_name}_20251201"
    record(db, unique_name, first, "started", oid=oid_of(db, first))
    result = fast_path(db, policy)
    [finished] = result["finished_from_earlier_attempts"]
    assert finished["state"] == "not_detached"
    assert first in [p["partition"] for p in result["dropped"]]
    assert run_windows(db, policy)["status"] == "clean"


def test_a_plain_detach_and_its_record_commit_together(
    db: Connection, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a default partition the detach is plain: if recording it fails, the detach
    is rolled back with it, so no detached table is ever left unrecorded."""
    partitioned(db, unique_name, MONTHS, default=True)
    policy = make_policy(unique_name)
    before = children(db, unique_name)
    real_move = partitions._move

    class Killed(BaseException):
        """The task dies between the DETACH and its record (SIGKILL, a lost worker)."""

    def dying_move(conn, key, state, *args, **kwargs):
        if state == "detached":
            raise Killed
        return real_move(conn, key, state, *args, **kwargs)

    monkeypatch.setattr(partitions, "_move", dying_move)
    with pytest.raises(Killed):
        fast_path(db, policy)
    monkeypatch.undo()
    assert children(db, unique_name) == before, "the detach was rolled back with its record"
    assert [state for _, _, state in evidence(db, unique_name)] == ["started"]
    result = fast_path(db, policy, run_id="run-2")
    assert result["finished_from_earlier_attempts"][0]["state"] == "not_detached"
    assert len(result["dropped"]) == 3


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


def partitioned_by(
    db: Connection,
    name: str,
    column_type: str,
    bounds: list[str],
    values: list[str],
) -> None:
    """public.<name>(id, tenant_id, created_at <column_type>) range-partitioned over
    ``bounds`` (literals of the column's type), one row per value, indexed and analysed."""
    table = sql.Identifier("public", name)
    db.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(table))
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint NOT NULL, tenant_id integer, created_at {} NOT NULL, "
            "payload text NOT NULL DEFAULT 'x') PARTITION BY RANGE (created_at)"
        ).format(table, sql.SQL(column_type))
    )
    for i, (low, high) in enumerate(itertools.pairwise(bounds)):
        db.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}::{}) TO ({}::{})").format(
                sql.Identifier("public", f"{name}_p{i}"),
                table,
                sql.Literal(low),
                sql.SQL(column_type),
                sql.Literal(high),
                sql.SQL(column_type),
            )
        )
    with db.cursor() as cur:
        cur.executemany(
            sql.SQL("INSERT INTO {} (id, tenant_id, created_at) VALUES (%s, 1, %s::{})").format(
                table, sql.SQL(column_type)
            ),
            list(enumerate(values, start=1)),
        )
    db.execute(sql.SQL("CREATE INDEX ON {} (created_at)").format(table))
    db.execute(sql.SQL("ANALYZE {}").format(table))


def ids(db: Connection, name: str) -> list[int]:
    rows = db.execute(
        sql.SQL("SELECT id FROM {} ORDER BY id").format(sql.Identifier("public", name))
    )
    return [r["id"] for r in rows]


def kept_by_the_row_path(db: Connection, name: str, zone: str, cutoff: dt.datetime) -> list[int]:
    """The ids the row deletes keep: created_at read in ``zone``, not older than the cutoff."""
    with db.transaction():
        db.execute("SELECT set_config('TimeZone', %s, true)", (zone,))
        rows = db.execute(
            sql.SQL("SELECT id FROM {} WHERE NOT created_at < %s ORDER BY id").format(
                sql.Identifier("public", name)
            ),
            (cutoff,),
        )
        return [r["id"] for r in rows]


# Europe/Berlin springs forward on 2026-03-29 at 02:00 (CET, +01) to 03:00 (CEST, +02):
# a wall-clock 02:30 reads as 01:30 UTC (the offset before the change), yet sorts below
# a bound of 03:00, which reads as 01:00 UTC. Pacific/Apia skipped 2011-12-30 entirely
# (-10 to +14): the date 2011-12-30 reads as 10:00 UTC that day, as does 2011-12-31.
DST_CASES = {
    "timestamp, Europe/Berlin": (
        "timestamp",
        "Europe/Berlin",
        ["2026-03-28 00:00", "2026-03-29 02:00", "2026-03-29 03:00", "2026-03-30 00:00"],
        [
            "2026-03-28 12:00",
            "2026-03-29 01:30",
            "2026-03-29 02:15",
            "2026-03-29 02:45",
            "2026-03-29 12:00",
        ],
        dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # 03:00 CEST
        ["_p0"],
    ),
    "date, Pacific/Apia": (
        "date",
        "Pacific/Apia",
        ["2011-12-28", "2011-12-29", "2011-12-30", "2011-12-31", "2012-01-02"],
        ["2011-12-28", "2011-12-29", "2011-12-30", "2011-12-31", "2012-01-01"],
        dt.datetime(2011, 12, 30, 10, 0, tzinfo=UTC),  # the start of 2011-12-31 there
        ["_p0", "_p1"],
    ),
}


@pytest.mark.parametrize("case", list(DST_CASES))
def test_a_partition_at_a_dst_gap_never_takes_rows_the_row_path_keeps(
    db: Connection, unique_name: str, case: str
) -> None:
    """Invariant: the fast path drops only rows the row deletes would delete."""
    column_type, zone, bounds, values, cutoff, dropped = DST_CASES[case]
    partitioned_by(db, unique_name, column_type, bounds, values)
    policy = make_policy(unique_name, timestamp_timezone=zone)
    kept = kept_by_the_row_path(db, unique_name, zone, cutoff)
    assert kept, "the case has rows the row path keeps"
    full_type = "timestamp without time zone" if column_type == "timestamp" else "date"
    result = fast_path(db, policy, cutoff=cutoff, column_type=full_type)
    assert [p["partition"] for p in result["dropped"]] == [
        f"public.{unique_name}{suffix}" for suffix in dropped
    ]
    [left] = result["left_to_rows"]
    assert f"rows that read as at or after the cutoff in {zone}" in left["why"]
    assert set(kept) <= set(ids(db, unique_name)), "every row the row path keeps is still there"
    summary = run_windows(db, policy, cutoff=cutoff)
    assert summary["status"] == "clean"
    assert ids(db, unique_name) == kept


def test_far_from_a_dst_gap_a_timestamp_partition_goes_without_reading_its_rows(
    db: Connection, unique_name: str
) -> None:
    """Upper bound at or before cutoff − the zone's largest offset change (1 h): no check."""
    bounds = ["2026-01-01 00:00", "2026-02-01 00:00", "2026-03-01 00:00"]
    partitioned_by(db, unique_name, "timestamp", bounds, ["2026-01-15 12:00", "2026-02-15 12:00"])
    policy = make_policy(unique_name, timestamp_timezone="Europe/Berlin")
    result = fast_path(
        db,
        policy,
        cutoff=dt.datetime(2026, 2, 28, 22, 0, tzinfo=UTC),  # 23:00 CET: an hour short of p1
        column_type="timestamp without time zone",
    )
    assert [p["partition"] for p in result["dropped"]] == [f"public.{unique_name}_p0"]
    assert result["left_to_rows"] == []


DUBLIN_BOUNDS = [dt.datetime(2026, m, 1, tzinfo=UTC) for m in (5, 6, 7, 8)]
DUBLIN_CUTOFF = dt.datetime(2026, 6, 30, 23, 30, tzinfo=UTC)


@pytest.mark.parametrize("where", ["database default", "session"])
def test_bounds_are_compared_as_values_whatever_the_datestyle(
    db: Connection, fresh_database, unique_name: str, where: str
) -> None:
    """DateStyle 'SQL, DMY' prints Irish summer time as 'IST', which reads back as Israel's
    (+02): June's upper bound would read an hour early, before a cutoff it is after."""
    decisions = []
    for datestyle in ("ISO, MDY", "SQL, DMY"):
        dsn = fresh_database(datestyle=datestyle) if where == "database default" else None
        with connect_dsn(dsn) if dsn else nullcontext(db) as conn:
            migrate(conn)
            partitioned(conn, unique_name, DUBLIN_BOUNDS)
            if where == "session":
                conn.execute("SELECT set_config('DateStyle', %s, false)", (datestyle,))
            policy = make_policy(unique_name, timestamp_timezone="Europe/Dublin")
            result = fast_path(conn, policy, cutoff=DUBLIN_CUTOFF)
            if where == "session":
                conn.execute("RESET DateStyle")
            decisions.append([(p["partition"], p["bounds"]) for p in result["dropped"]])
    may = f"public.{unique_name}_20260501"
    assert [[name for name, _ in d] for d in decisions] == [[may], [may]], "June straddles it"
    assert decisions[0] == decisions[1], "the evidence prints the bounds the same way too"
    assert decisions[0][0][1].startswith("FOR VALUES FROM ('2026-05-01 ")


def test_a_never_analysed_partition_is_counted_not_shown_as_empty(
    db: Connection, unique_name: str
) -> None:
    partitioned(db, unique_name, MONTHS, analyse=False)
    never = db.execute(
        "SELECT c.reltuples FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass",
        (f"public.{unique_name}",),
    ).fetchall()
    assert {r["reltuples"] for r in never} <= {-1.0, 0.0}, "no statistics: as never analysed"
    result = fast_path(db, make_policy(unique_name), dry_run=True)
    assert [p["estimated_rows"] for p in result["would_go"]] == [62, 62, 56]
    assert result["estimated_rows"] == 180 == old_rows(db, unique_name)
    fast_path(db, make_policy(unique_name))
    recorded = db.execute(
        "SELECT estimated_rows FROM retention.partition_drops WHERE policy = %s "
        "ORDER BY partition_name",
        (unique_name,),
    ).fetchall()
    assert [r["estimated_rows"] for r in recorded] == [62, 62, 56]


def test_drop_partitions_of_an_old_run_never_drops_while_another_run_holds_the_lease(
    db: Connection, unique_name: str
) -> None:
    """A cleared drop_partitions task of an old run takes the run lease first, as a
    window does: while another run holds it, nothing is detached."""
    from retention.airflow.steps import RunLeaseHeld, drop_partitions_step
    from retention.policy.params import RunSettings
    from retention.runs.lease import take_run_lease

    partitioned(db, unique_name, MONTHS)
    policy = make_policy(unique_name)
    assert take_run_lease(db, unique_name, policy.dag_id, "run-new", lambda _: "running").taken
    settings = RunSettings(dry_run=False, window_rows=None, batch_rows=100)
    cutoff = {"cutoff": CUTOFF.isoformat()}
    with pytest.raises(RunLeaseHeld, match="run-new holds the run lease"):
        drop_partitions_step(
            policy,
            run_id="run-old",
            cutoff=cutoff,
            settings=settings,
            run_state=lambda run_id: "running",
        )
    assert len(children(db, unique_name)) == 4, "nothing detached"
    assert evidence(db, unique_name) == []
    result = drop_partitions_step(
        policy,
        run_id="run-old",
        cutoff=cutoff,
        settings=settings,
        run_state=lambda run_id: "success",  # once that run has ended, the lease is free
    )
    assert len(result["dropped"]) == 3


def test_a_concurrent_detach_cut_short_in_its_second_phase_is_finished_by_the_retry(
    db: Connection, test_dsn: str, unique_name: str
) -> None:
    """CONCURRENTLY's second phase waits for older transactions on the table; one that
    outlasts lock_timeout leaves the detach pending, and the retry FINALIZEs it (in one
    transaction with its record) and drops the table."""
    partitioned(db, unique_name, MONTHS[2:])  # one expired partition: February
    policy = make_policy(unique_name, lock_timeout_ms=300)
    february = f"public.{unique_name}_20260201"
    with psycopg.connect(test_dsn, autocommit=True) as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(unique_name)))
        with pytest.raises(PartitionDropError, match="The detach is pending") as failed:
            fast_path(db, policy)
        reader.execute("ROLLBACK")
    assert "AccessShareLock" in str(failed.value), "the reader is named"
    pending = db.execute(
        "SELECT inhdetachpending AS p FROM pg_inherits WHERE inhrelid = %s::regclass",
        (february,),
    ).fetchone()
    assert pending == {"p": True}
    assert drop_record(db, unique_name, february, "run-1")["state"] == "not_detached"
    again = fast_path(db, policy)
    assert again["finished_from_earlier_attempts"] == [
        {"partition": february, "run_id": "run-1", "state": "dropped"}
    ]
    assert not exists(db, february)
    assert drop_record(db, unique_name, february, "run-1")["state"] == "dropped"


def pending_detach(test_dsn: str, name: str, partition: str) -> None:
    """Leave a DETACH … CONCURRENTLY of ``partition`` pending, as an interrupted one is:
    a reader's snapshot outlasts the second phase's lock_timeout."""
    with (
        psycopg.connect(test_dsn, autocommit=True) as reader,
        psycopg.connect(test_dsn, autocommit=True) as detacher,
    ):
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name)))
        detacher.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            detacher.execute(
                sql.SQL("ALTER TABLE {} DETACH PARTITION {} CONCURRENTLY").format(
                    sql.Identifier("public", name), sql.SQL(partition)
                )
            )
        reader.execute("ROLLBACK")


def is_pending(db: Connection, partition: str) -> bool:
    row = db.execute(
        "SELECT inhdetachpending AS p FROM pg_inherits WHERE inhrelid = %s::regclass",
        (partition,),
    ).fetchone()
    return bool(row and row["p"])


def test_a_pending_detach_keeps_runs_dirty_and_is_finished_before_any_early_return(
    db: Connection, test_dsn: str, unique_name: str
) -> None:
    """A pending detach hides the partition's rows from the parent: reconcile reads the
    catalog and names it; the finishing pass FINALIZEs it even when the fast path no
    longer applies (here: the policy was switched to ``partitions: rows``)."""
    partitioned(db, unique_name, MONTHS[2:])
    policy = make_policy(unique_name, lock_timeout_ms=300)
    february = f"public.{unique_name}_20260201"
    with psycopg.connect(test_dsn, autocommit=True) as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(unique_name)))
        with pytest.raises(PartitionDropError, match="The detach is pending"):
            fast_path(db, policy)
        reader.execute("ROLLBACK")
    assert is_pending(db, february)
    summary = reconcile_after_plan(db, policy, "run-1")
    assert summary["status"] == "dirty"
    assert any(
        p.startswith(f"{february}: a DETACH") and "pending" in p
        for p in summary["partition_problems"]
    ), summary["partition_problems"]
    rows_only = make_policy(unique_name, lock_timeout_ms=300, partitions="rows")
    result = fast_path(db, rows_only, run_id="run-2")
    assert "partitions: rows" in result["skipped"]
    assert result["finished_from_earlier_attempts"] == [
        {"partition": february, "run_id": "run-1", "state": "dropped"}
    ]
    assert not exists(db, february)
    assert reconcile_after_plan(db, rows_only, "run-2")["status"] == "clean"


def test_a_pending_detach_retention_did_not_start_is_left_alone_and_named(
    db: Connection, test_dsn: str, unique_name: str
) -> None:
    """FINALIZE skips the checks of rules 2 and 3: only a detach this package started is
    finished; anyone else's stays pending (and keeps the runs dirty)."""
    partitioned(db, unique_name, MONTHS[2:])
    policy = make_policy(unique_name, lock_timeout_ms=300)
    february = f"public.{unique_name}_20260201"
    pending_detach(test_dsn, unique_name, february)
    assert is_pending(db, february)
    result = fast_path(db, policy)
    assert exists(db, february), "not dropped"
    assert is_pending(db, february), "not finished either"
    [left] = result["left_to_rows"]
    assert left["partition"] == february
    assert left["why"] == "a detach pending that retention did not start"
    assert evidence(db, unique_name) == [(february, "rows", "left")]
    summary = run_windows(db, policy)
    assert summary["status"] == "dirty"
    assert [p for p in summary["partition_problems"] if february in p], summary


def test_a_policy_with_children_leaves_its_partitions_to_the_row_path(
    db: Connection, unique_name: str
) -> None:
    """A listed child without a constraint would be orphaned by a dropped partition."""
    partitioned(db, unique_name, MONTHS)
    db.execute(f"CREATE TABLE public.{unique_name}_r (id bigint PRIMARY KEY, asset_id bigint)")
    policy = make_policy(
        unique_name,
        children=[{"table": f"{unique_name}_r", "foreign_key": "asset_id", "references": "id"}],
    )
    assert "children: listed" in fast_path(db, policy)["skipped"]
    assert len(children(db, unique_name)) == 4


def test_a_hold_placed_after_the_detach_keeps_the_detached_table(
    db: Connection, unique_name: str
) -> None:
    """The listing checked the holds; a hold placed before the drop (here: after an
    earlier attempt detached the table) must still win: the table stays, whole."""
    policy, first, _oid = detached_by_an_earlier_attempt(db, unique_name)
    rows_before = count_rows(db, first)
    hold = place_hold(
        db, policy=unique_name, match="key", value="5", reason="case", placed_by="ann"
    )
    result = fast_path(db, policy)
    (finished,) = result["finished_from_earlier_attempts"]
    assert (finished["partition"], finished["state"]) == (first, "detached")
    assert "legal hold" in finished["error"]
    assert exists(db, first)
    assert count_rows(db, first) == rows_before
    assert "legal hold" in drop_record(db, unique_name, first)["last_error"]
    lift_hold(db, hold.hold_id, reason="closed", lifted_by="ann")
    again = fast_path(db, policy, run_id="run-2")
    assert [f["state"] for f in again["finished_from_earlier_attempts"]] == ["dropped"]
    assert not exists(db, first)


def count_rows(db: Connection, qualified: str) -> int:
    return int(
        db.execute(sql.SQL("SELECT count(*) AS n FROM {}").format(sql.SQL(qualified))).fetchone()[
            "n"
        ]
    )


def test_key_and_tenant_holds_are_looked_up_through_the_partitions_indexes(
    db: Connection, unique_name: str
) -> None:
    """With a key or tenant hold active, whether an expired partition holds a held row is
    an index lookup per held value, never a read of every row of the partition."""
    partitioned(db, unique_name, MONTHS, rows_per_day=200)
    table = sql.Identifier(unique_name)
    db.execute(sql.SQL("UPDATE {} SET tenant_id = id % 500").format(table))  # many tenants
    db.execute(sql.SQL("CREATE INDEX ON {} (tenant_id)").format(table))
    db.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(unique_name)))
    policy = make_policy(unique_name)
    december = f"{unique_name}_20251201"
    for match, value in (("key", "999999999"), ("tenant", "7"), ("tenant", "not-a-number")):
        place_hold(db, policy=unique_name, match=match, value=value, reason="c", placed_by="a")

    def scans() -> dict[str, int]:
        # this session's counts not yet flushed to pg_stat_user_tables: compared before
        # and after within one transaction, so the setup's own scans cancel out
        return db.execute(
            "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables "
            "WHERE schemaname = 'public' AND relname = %s",
            (december,),
        ).fetchone()

    with db.transaction(force_rollback=True):
        before = scans()
        partitions._held_rows(db, policy, "public", december)
        after = scans()
    seq_scans = after["seq_scan"] - before["seq_scan"]
    assert seq_scans == 0, f"the held-row check read all of {december}"
    assert after["idx_scan"] - before["idx_scan"] >= 2
    place_hold(db, policy=unique_name, match="tenant", value="01", reason="c", placed_by="a")
    assert "legal hold" in (partitions._held_rows(db, policy, "public", december) or "")
