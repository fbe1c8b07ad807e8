"""A second remote kind that is not HTTP runs through the same worker, limiter, leases and ledger.

The kind below removes files from one folder instead of calling an API: it
brings only its transport (``attempt``: remove the file, say what that meant)
and its path check (``refuse``). Claims, tokens, lease renewal, the pure
decision, the atomic finish (operation done, row deleted, attempt written) and
the worker's figures are the shared ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from psycopg import sql

from retention.db.connection import Connection
from retention.objects.deleter import ObjectDeleter, work_operations
from retention.objects.keys import Operation, bad_path_value
from retention.objects.kind import ObjectKind
from retention.policy import Policy
from retention.queue.classify import Classification, Outcome
from retention.queue.leased import OPERATIONS, LeasedQueue
from tests.support.policies import remote_policy
from tests.support.remote import enqueue_all
from tests.support.tables import count, create_media_table, plan


class FolderKind(ObjectKind):
    """Deletes each operation's object as the file of that name in one folder."""

    def __init__(self, policy: Policy, folder: Path) -> None:
        super().__init__(policy)
        self.folder = folder

    def refuse(self, op: Operation) -> tuple[str, str] | None:
        problem = bad_path_value(op.object_id)
        if problem is None and "/" in op.object_id:
            problem = "contains a slash"
        return None if problem is None else ("invalid_object_id", f"the object id {problem}")

    def attempt(self, conn: Connection, job: Operation) -> Classification:
        path = self.folder / job.object_id
        try:
            path.unlink()
        except FileNotFoundError:
            return Classification(Outcome.CONFIRMED, None, reason="no such file (already gone)")
        except IsADirectoryError:
            return Classification(
                Outcome.REJECTED, None, "is_a_directory", reason=f"{path.name} is a folder"
            )
        return Classification(Outcome.CONFIRMED, None, reason="file removed")


def ops_by_state(db: Connection, policy: Policy) -> dict[str, int]:
    rows = db.execute(
        "SELECT state, count(*) AS n FROM retention.operations WHERE policy = %s GROUP BY state",
        (policy.name,),
    )
    return {r["state"]: r["n"] for r in rows}


def test_a_folder_kind_deletes_through_the_shared_worker_limiter_leases_and_ledger(
    db, unique_name, tmp_path
) -> None:
    create_media_table(db, unique_name, 30, new_rows=5)
    policy = remote_policy(unique_name, claim_batch=7, rate_per_second=1000, burst=100)
    assert enqueue_all(db, policy) == 30
    # Another worker holds one operation's lease: the folder worker must leave it alone.
    queue = LeasedQueue(OPERATIONS, policy.name, policy.remote.lease)
    [held] = queue.claim(db, "someone-else", 1)
    others = [f"obj-{i}" for i in range(1, 31) if f"obj-{i}" != held["object_id"]]
    folder, gone = others[0], others[1]
    for name in [held["object_id"], *others]:
        if name == folder:
            (tmp_path / name).mkdir()  # cannot be removed as a file: rejected, dead
        elif name != gone:  # already gone: as deleted as a removed one
            (tmp_path / name).write_text("x")
    (tmp_path / "obj-31").write_text("young")  # a row younger than the cutoff: never touched

    stats = work_operations(db, FolderKind(policy, tmp_path), budget_seconds=30)

    assert (stats.done, stats.dead, stats.claimed) == (28, 1, 29)
    assert stats.tokens_taken >= 29, "every file removal spent a token of the shared bucket"
    assert len(stats.transactions) == len(stats.batches) == 5, "29 jobs in batches of 7"
    assert sum(rows for rows, _ in stats.transactions) == stats.rows_deleted == 28
    assert dict(stats.outcomes) == {"confirmed": 28, "rejected": 1}
    assert json.loads(json.dumps(stats.as_dict())) == stats.as_dict()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([folder, "obj-31", held["object_id"]])
    assert ops_by_state(db, policy) == {"done": 28, "dead": 1, "in_flight": 1}
    # The rejected one, the held one and the five young rows stay.
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 2 + 5  # noqa: S608
    assert (
        count(
            db,
            "SELECT count(*) FROM retention.attempts a JOIN retention.operations o "
            "USING (operation_key) WHERE o.policy = %s",
            policy.name,
        )
        == 29
    )


def test_the_folder_kind_refuses_a_path_that_leaves_its_folder(db, unique_name, tmp_path) -> None:
    create_media_table(db, unique_name, 3)
    table = sql.Identifier("public", unique_name)
    db.execute(sql.SQL("UPDATE {} SET object_key = '..' WHERE id = 2").format(table))
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    (tmp_path / "obj-1").write_text("x")
    (tmp_path / "obj-3").write_text("x")

    stats = work_operations(db, FolderKind(policy, tmp_path), budget_seconds=30)

    assert (stats.done, stats.dead) == (2, 1)
    assert dict(stats.failure_classes) == {"invalid_object_id": 1}
    assert list(tmp_path.iterdir()) == []
    assert tmp_path.parent.exists()


def test_a_window_of_the_folder_kind_counts_its_batches_once_in_one_meaning(
    db, unique_name, tmp_path
) -> None:
    """The window deleter opens the kind it is given; the window's figures (its result and
    the window ledger) are the atomic finish's transactions, whatever the transport."""
    create_media_table(db, unique_name, 20, new_rows=3)
    policy = remote_policy(unique_name, claim_batch=6)
    (window,) = plan(db, policy)
    for i in range(1, 21):
        (tmp_path / f"obj-{i}").write_text("x")
    kinds: list[FolderKind] = []

    def open_kind() -> FolderKind:
        kinds.append(FolderKind(policy, tmp_path))
        return kinds[-1]

    deleter = ObjectDeleter(policy.table_spec, policy.timeouts, policy=policy, open_kind=open_kind)
    result = deleter.run(db, window, batch_rows=100, dry_run=False)

    assert len(kinds) == 1
    assert list(tmp_path.iterdir()) == []
    assert (result.rows_deleted, result.batches) == (20, 4), "20 operations in batches of 6"
    ledger = db.execute(
        "SELECT rows_deleted, batches, longest_batch_ms FROM retention.windows "
        "WHERE window_key = %s",
        (window.window_key,),
    ).fetchone()
    assert (ledger["rows_deleted"], ledger["batches"]) == (result.rows_deleted, result.batches)
    assert ledger["longest_batch_ms"] == pytest.approx(result.longest_batch_ms)
    assert result.details["remote"]["done"] == 20
