"""The operation ledger and worker against the real Postgres and the sandbox API on loopback."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import psycopg
import pytest

from retention.db.connection import Connection, connect_dsn
from retention.evidence.replay import ReplayError, replay_dead
from retention.objects.enqueue import enqueue_window
from retention.objects.keys import Operation
from retention.objects.kind import CredentialFailure, OperationsKind
from retention.queue.classify import Outcome
from retention.queue.leased import OPERATIONS, Finish, LeasedQueue, State
from retention.queue.worker import Attempt
from tests.support.policies import HTTP_CONN_ID, remote_policy
from tests.support.remote import enqueue_all
from tests.support.remote import work as work_pass
from tests.support.tables import count, create_media_table, plan


def work(test_dsn: str, policy, server, **kw) -> dict:
    return work_pass(test_dsn, policy, server, **kw).as_dict()


def queue(policy) -> LeasedQueue:
    return LeasedQueue(OPERATIONS, policy.name, policy.remote.lease)


def claim(conn: Connection, policy, owner: str, n: int) -> list[Operation]:
    return [Operation.from_row(row) for row in queue(policy).claim(conn, owner, n)]


def states(db: Connection, policy) -> dict[str, int]:
    rows = db.execute(
        "SELECT state, count(*) AS n FROM retention.operations WHERE policy = %s GROUP BY state",
        (policy.name,),
    )
    return {r["state"]: r["n"] for r in rows}


def expire_leases(db: Connection, policy) -> None:
    """Make every lease of the policy expire now, instead of sleeping past it."""
    db.execute(
        "UPDATE retention.operations SET lease_expires_at = now() - interval '1 second' "
        "WHERE policy = %s AND state = 'in_flight'",
        (policy.name,),
    )


def test_confirmed_deletes_remote_then_local_once(db, unique_name, sandbox, test_dsn) -> None:
    create_media_table(db, unique_name, 40, new_rows=10)
    policy = remote_policy(unique_name)
    assert enqueue_all(db, policy) == 40
    assert enqueue_all(db, policy) == 0, "re-enqueueing is a no-op"
    stats = work(test_dsn, policy, sandbox)
    assert stats["attempts_by_outcome"] == {"confirmed": 40}
    assert states(db, policy) == {"done": 40}
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 10  # noqa: S608
    effects = sandbox.state.stats()["effects"]
    assert len(effects) == 40
    assert set(effects.values()) == {1}
    keys = {r["key"] for r in sandbox.state.stats()["requests"]}
    stored = {
        r["operation_key"]
        for r in db.execute(
            "SELECT operation_key FROM retention.operations WHERE policy = %s", (policy.name,)
        )
    }
    assert keys == stored, "every call carries its operation key as Idempotency-Key"


def test_two_concurrent_claimers_never_hold_the_same_operation(db, unique_name, test_dsn) -> None:
    create_media_table(db, unique_name, 300)
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    taken: dict[str, list[str]] = {"a": [], "b": []}

    def claimer(name: str) -> None:
        with connect_dsn(test_dsn) as conn:
            while batch := claim(conn, policy, name, 7):
                taken[name] += [op.operation_key for op in batch]

    threads = [threading.Thread(target=claimer, args=(n,)) for n in taken]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not set(taken["a"]) & set(taken["b"])
    assert len(taken["a"]) + len(taken["b"]) == 300
    assert taken["a"]
    assert taken["b"]


def _die_after_remote_success(test_dsn: str, policy, url: str) -> None:
    """Child process: call the API, then die before recording anything."""
    from retention.objects.deleter import work_operations
    from retention.queue.http import plain_sender

    OperationsKind.record = lambda *a, **k: os._exit(17)  # type: ignore[method-assign]
    with connect_dsn(test_dsn) as conn:
        work_operations(conn, OperationsKind(policy, plain_sender(url, 1)))


def test_worker_killed_between_remote_success_and_commit(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 1)
    policy = remote_policy(unique_name, request_timeout_seconds=0.5, lease_seconds=60)
    enqueue_all(db, policy)
    child = multiprocessing.get_context("fork").Process(
        target=_die_after_remote_success, args=(test_dsn, policy, sandbox.url)
    )
    child.start()
    child.join(30)
    assert child.exitcode == 17
    assert states(db, policy) == {"in_flight": 1}
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 1  # noqa: S608
    assert work(test_dsn, policy, sandbox)["claimed"] == 0, "the dead worker's lease is still valid"
    expire_leases(db, policy)
    stats = work(test_dsn, policy, sandbox)
    assert stats["attempts_by_outcome"] == {"confirmed": 1}
    op = db.execute(
        "SELECT state, claim_count, lease_expiries, attempt_count FROM retention.operations "
        "WHERE policy = %s",
        (policy.name,),
    ).fetchone()
    assert op == {"state": "done", "claim_count": 2, "lease_expiries": 1, "attempt_count": 1}
    server = sandbox.state.stats()
    assert server["effects"] == {"obj-1": 1}, "one remote effect"
    assert server["repeats"] == 1, "the retry reused the same idempotency key"
    assert len({r["key"] for r in server["requests"]}) == 1
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 0  # noqa: S608


def test_dropped_connection_after_apply_is_retried_with_the_same_key(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 5)
    sandbox.state.configure(drop_after_apply=["obj-3"])
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    for _ in range(5):  # the dropped one backs off; make it due now between passes
        if states(db, policy) == {"done": 5}:
            break
        work(test_dsn, policy, sandbox)
        db.execute(
            "UPDATE retention.operations SET not_before = now() "
            "WHERE policy = %s AND state = 'pending'",
            (policy.name,),
        )
    assert states(db, policy) == {"done": 5}
    server = sandbox.state.stats()
    assert server["effects"]["obj-3"] == 1
    assert server["repeats"] == 1


def test_stale_worker_cannot_overwrite_a_newer_claim(db, unique_name, test_dsn) -> None:
    create_media_table(db, unique_name, 1)
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    kind = OperationsKind(policy, sandbox_sender_nowhere())
    (old,) = claim(db, policy, "old-worker", 5)
    expire_leases(db, policy)
    (new,) = claim(db, policy, "new-worker", 5)
    assert new.operation_key == old.operation_key
    rejected = Attempt(old, Finish(state=State.DEAD, outcome=Outcome.REJECTED, status=400), 0, 0)
    assert kind.record(db, "old-worker", [rejected], None).rows_deleted == {}
    assert states(db, policy) == {"in_flight": 1}
    confirmed = Attempt(new, Finish(state=State.DONE, outcome=Outcome.CONFIRMED, status=204), 0, 0)
    assert kind.record(db, "new-worker", [confirmed], None).rows_deleted == {new.operation_key: 1}
    assert states(db, policy) == {"done": 1}


def test_renew_reports_a_lost_lease_and_the_worker_stops_working_it(
    db, unique_name, test_dsn
) -> None:
    create_media_table(db, unique_name, 3)
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    ours = claim(db, policy, "slow-worker", 3)
    keys = sorted(op.operation_key for op in ours)
    assert queue(policy).renew(db, "slow-worker", keys) == set(keys)
    db.execute(
        "UPDATE retention.operations SET lease_expires_at = now() - interval '1 second' "
        "WHERE operation_key = %s",
        (keys[0],),
    )
    (taken,) = claim(db, policy, "other-worker", 1)
    assert taken.operation_key == keys[0]
    assert queue(policy).renew(db, "slow-worker", keys) == set(keys[1:]), "one lease was lost"
    assert queue(policy).release(db, "slow-worker", keys) == set(keys[1:])
    assert states(db, policy) == {"in_flight": 1, "pending": 2}


def test_poisoned_operation_goes_dead_without_blocking_the_rest_and_replay_revives_it(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 30)
    sandbox.state.configure(reject=["obj-7"], hold=["obj-9"])
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    for _ in range(10):  # each pass retries what is due; make the backoffs due now
        if not (states(db, policy).get("pending") or states(db, policy).get("in_flight")):
            break
        work(test_dsn, policy, sandbox)
        db.execute(
            "UPDATE retention.operations SET not_before = now() "
            "WHERE policy = %s AND state = 'pending'",
            (policy.name,),
        )
    assert states(db, policy) == {"done": 28, "dead": 2}
    dead = {
        r["object_id"]: r
        for r in db.execute(
            "SELECT * FROM retention.dead_operations WHERE policy = %s", (policy.name,)
        )
    }
    assert dead["obj-7"]["failure_class"] == "http_422"
    assert dead["obj-7"]["attempt_count"] == 1
    assert dead["obj-9"]["failure_class"] == "http_403"
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 2  # noqa: S608

    with pytest.raises(ReplayError):
        replay_dead(db, policy=policy.name, requested_by="test")
    sandbox.state.configure(reject=[], hold=[])
    replayed = replay_dead(
        db, policy=policy.name, failure_class="http_422", requested_by="test", reason="fixed"
    )
    assert replayed["operation_keys"] == [dead["obj-7"]["operation_key"]]
    audit = db.execute(
        "SELECT kind, policy, requested_by, reason, operation_keys FROM retention.replays "
        "WHERE replay_id = %s",
        (replayed["replay_id"],),
    ).fetchone()
    assert audit["operation_keys"] == replayed["operation_keys"]
    assert (audit["kind"], audit["requested_by"], audit["reason"]) == (
        "operations",
        "test",
        "fixed",
    )
    op = db.execute(
        "SELECT state, attempt_count FROM retention.operations WHERE operation_key = %s",
        (dead["obj-7"]["operation_key"],),
    ).fetchone()
    assert op == {"state": "pending", "attempt_count": 0}
    work(test_dsn, policy, sandbox)
    assert states(db, policy) == {"done": 29, "dead": 1}


def test_credential_failure_stops_the_task_and_dead_letters_nothing(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 20)
    sandbox.state.configure(deny_all=True)
    policy = remote_policy(unique_name, auth_failure_limit=4)
    enqueue_all(db, policy)
    with pytest.raises(CredentialFailure, match=r"4 calls in a row .* HTTP 401"):
        work(test_dsn, policy, sandbox)
    assert states(db, policy) == {"pending": 20}
    assert len(sandbox.state.stats()["requests"]) == 4


def test_http_connection_comes_from_airflow(sandbox) -> None:
    from retention.airflow.connections import http_sender

    policy = remote_policy("x")
    kind = OperationsKind(policy, http_sender(HTTP_CONN_ID, 2))
    result = kind.send(Operation("key-1", 1, "a b/c", None, "1", None, 0, 1, 0))
    assert result.status == 204
    assert sandbox.state.stats()["requests"][0]["object"] == "a%20b%2Fc"


def test_a_redirect_is_a_failed_attempt_and_is_never_followed(
    db, unique_name, sandbox, test_dsn
) -> None:
    from devtools.sandbox_api import SandboxServer

    elsewhere = SandboxServer(0).start()
    try:
        create_media_table(db, unique_name, 2)
        sandbox.state.configure(redirect={"obj-1": elsewhere.url + "/v1/assets/obj-1"})
        policy = remote_policy(unique_name, backoff_base_seconds=60, backoff_max_seconds=60)
        enqueue_all(db, policy)
        stats = work(test_dsn, policy, sandbox)
        assert stats["statuses"] == {"204": 1, "307": 1}
        assert elsewhere.state.stats()["requests"] == [], "the redirect was not followed"
        op = db.execute(
            "SELECT state, attempt_count, failure_class, last_status_code "
            "FROM retention.operations WHERE policy = %s AND object_id = 'obj-1'",
            (policy.name,),
        ).fetchone()
        assert op == {
            "state": "pending",
            "attempt_count": 1,
            "failure_class": "http_307",
            "last_status_code": 307,
        }
        assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 1  # noqa: S608
    finally:
        elsewhere.stop()


def test_out_of_token_budget_leaves_operations_pending_and_ends_cleanly(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 12)
    policy = remote_policy(unique_name, rate_per_second=2, burst=1)
    enqueue_all(db, policy)
    started = time.monotonic()
    stats = work(test_dsn, policy, sandbox, budget_seconds=1.5)
    assert time.monotonic() - started < 3
    assert stats["out_of_time"] is True
    assert stats["released"] > 0
    done = states(db, policy).get("done", 0)
    assert 2 <= done <= 5, "1 burst token plus 2/s for 1.5 s"
    assert states(db, policy) == {"done": done, "pending": 12 - done}
    assert len(sandbox.state.stats()["requests"]) == done


class Reclaimer(threading.Thread):
    """Keeps trying to take over expired leases of a policy while a worker runs."""

    def __init__(self, dsn: str, policy, table=OPERATIONS) -> None:
        super().__init__()
        self.dsn, self.policy, self.table = dsn, policy, table
        self.taken: list[str] = []
        self.tries = 0
        self.stop = threading.Event()

    def run(self) -> None:
        from retention.queue.leased import _claim_statement

        statement = _claim_statement(self.table, "in_flight", False)
        with connect_dsn(self.dsn) as conn:
            while not self.stop.is_set():
                rows = conn.execute(
                    statement,
                    {
                        "policy": self.policy.name,
                        "owner": "reclaimer",
                        "lease_seconds": 60,
                        "scope": None,
                        "state": "in_flight",
                        "n": 100,
                    },
                ).fetchall()
                self.taken += [r[self.table.id_column] for r in rows]
                self.tries += 1
                self.stop.wait(0.05)


def test_leases_are_renewed_while_a_slow_batch_is_worked(db, unique_name, sandbox, test_dsn):
    create_media_table(db, unique_name, 10)
    sandbox.state.configure(latency_ms=300)
    policy = remote_policy(
        unique_name, request_timeout_seconds=0.5, lease_seconds=1.0, claim_batch=5
    )
    enqueue_all(db, policy)
    reclaimer = Reclaimer(test_dsn, policy)
    reclaimer.start()
    try:
        stats = work(test_dsn, policy, sandbox)  # 5 calls of 0.3 s per batch: 1.5 leases
    finally:
        reclaimer.stop.set()
        reclaimer.join()
    assert reclaimer.tries > 20
    assert reclaimer.taken == [], "no lease ever expired under the worker"
    assert stats["lost_leases"] == 0
    rows = db.execute(
        "SELECT state, claim_count, lease_expiries FROM retention.operations WHERE policy = %s",
        (policy.name,),
    ).fetchall()
    assert {(r["state"], r["claim_count"], r["lease_expiries"]) for r in rows} == {("done", 1, 0)}
    assert len(sandbox.state.stats()["requests"]) == 10, "no operation was called twice"


def test_leases_are_renewed_while_waiting_for_tokens(db, unique_name, sandbox, test_dsn):
    create_media_table(db, unique_name, 4)
    policy = remote_policy(
        unique_name,
        rate_per_second=1,
        burst=1,
        request_timeout_seconds=0.3,
        lease_seconds=0.6,
        claim_batch=4,
    )
    enqueue_all(db, policy)
    reclaimer = Reclaimer(test_dsn, policy)
    reclaimer.start()
    try:
        stats = work(test_dsn, policy, sandbox)  # 1 call/s: the last waits ~3 s, 3 leases
    finally:
        reclaimer.stop.set()
        reclaimer.join()
    assert stats["waited_for_tokens_seconds"] > 2
    assert reclaimer.taken == []
    claims = db.execute(
        "SELECT claim_count, state FROM retention.operations WHERE policy = %s", (policy.name,)
    ).fetchall()
    assert {(r["claim_count"], r["state"]) for r in claims} == {(1, "done")}


def test_a_window_pass_does_not_wait_out_a_backoff(db, unique_name, sandbox, test_dsn) -> None:
    create_media_table(db, unique_name, 3)
    sandbox.state.configure(fail_5xx={"obj-2": 1})
    policy = remote_policy(unique_name, backoff_base_seconds=30, backoff_max_seconds=30)
    windows = plan(db, policy)
    for window in windows:
        enqueue_window(db, policy, window, 100)
    started = time.monotonic()
    stats = work(test_dsn, policy, sandbox, scope=windows[0].window_key)
    assert time.monotonic() - started < 5, "the pass returned instead of waiting 15-30 s"
    assert (stats["done"], stats["retried"]) == (2, 1)
    left = db.execute(
        "SELECT state, attempt_count, not_before > now() + interval '10 seconds' AS later "
        "FROM retention.operations WHERE policy = %s AND object_id = 'obj-2'",
        (policy.name,),
    ).fetchone()
    assert left == {"state": "pending", "attempt_count": 1, "later": True}


def test_replay_by_failure_class_since_a_time(db, unique_name, sandbox, test_dsn) -> None:
    import datetime as dt

    create_media_table(db, unique_name, 4)
    sandbox.state.configure(reject=["obj-1", "obj-2", "obj-3"], fail_5xx={"obj-4": 9})
    policy = remote_policy(unique_name, max_attempts=1)  # obj-4 dead as max_attempts
    enqueue_all(db, policy)
    work(test_dsn, policy, sandbox)
    now = dt.datetime.now(dt.UTC)
    db.execute(
        "UPDATE retention.operations SET updated_at = %s "
        "WHERE policy = %s AND object_id IN ('obj-1', 'obj-2')",
        (now - dt.timedelta(days=2), policy.name),
    )
    replayed = replay_dead(
        db,
        policy=policy.name,
        failure_class="http_422",
        since=now - dt.timedelta(days=1),
        requested_by="t",
    )
    key3 = db.execute(
        "SELECT operation_key FROM retention.operations WHERE policy = %s AND object_id = 'obj-3'",
        (policy.name,),
    ).fetchone()["operation_key"]
    assert replayed["operation_keys"] == [key3], "only http_422, and only since then"
    assert states(db, policy) == {"dead": 3, "pending": 1}


def test_two_replays_at_once_move_and_audit_each_operation_once(
    db, unique_name, sandbox, test_dsn
) -> None:
    """Why retention__replay may run several runs at once: the second replay of the same
    operations waits for the first's row locks, then finds them pending and leaves them."""
    create_media_table(db, unique_name, 3)
    sandbox.state.configure(reject=["obj-1", "obj-2"])
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    work(test_dsn, policy, sandbox)
    assert states(db, policy) == {"dead": 2, "done": 1}
    second: dict = {}
    with connect_dsn(test_dsn) as first, connect_dsn(test_dsn) as other:
        with first.transaction():
            moved = replay_dead(
                first, policy=policy.name, failure_class="http_422", requested_by="a"
            )
            racer = threading.Thread(
                target=lambda: second.update(
                    replay_dead(
                        other, policy=policy.name, failure_class="http_422", requested_by="b"
                    )
                )
            )
            racer.start()
            time.sleep(0.5)
            assert racer.is_alive(), "the second replay waits for the first's row locks"
        racer.join(10)
    assert len(moved["operation_keys"]) == 2
    assert second["operation_keys"] == [], "nothing moved twice"
    audited = db.execute(
        "SELECT requested_by, cardinality(operation_keys) AS n FROM retention.replays "
        "WHERE policy = %s ORDER BY requested_by",
        (policy.name,),
    ).fetchall()
    assert audited == [{"requested_by": "a", "n": 2}, {"requested_by": "b", "n": 0}]
    assert states(db, policy) == {"pending": 2, "done": 1}


def test_a_replay_locks_its_operations_in_key_order_so_two_replays_cannot_deadlock(
    db, unique_name, sandbox, test_dsn
) -> None:
    """A replay by failure class finds its rows in its index's (here the table's) order and
    one by ids in key order; both lock in key order, so neither can hold a row the other
    needs while waiting for one it holds. Here another transaction holds the lowest key:
    the replay waits for it having locked nothing else (every other row is free), even
    though the table holds the rows highest key first."""
    create_media_table(db, unique_name, 6)
    rejected = [f"obj-{n}" for n in range(1, 7)]
    sandbox.state.configure(reject=rejected)
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    work(test_dsn, policy, sandbox)
    keys = [
        r["operation_key"]
        for r in db.execute(
            "SELECT operation_key FROM retention.operations WHERE policy = %s "
            "AND state = 'dead' ORDER BY operation_key",
            (policy.name,),
        )
    ]
    assert len(keys) == 6
    for key in reversed(keys):  # new row versions, highest key first in the table
        db.execute(
            "UPDATE retention.operations SET updated_at = updated_at WHERE operation_key = %s",
            (key,),
        )
    lock_one = "SELECT 1 FROM retention.operations WHERE operation_key = %s FOR UPDATE"
    done: dict = {}
    with (
        connect_dsn(test_dsn) as holder,
        connect_dsn(test_dsn) as replayer,
        connect_dsn(test_dsn) as probe,
    ):
        with holder.transaction():
            holder.execute(lock_one, (keys[0],))
            pid = replayer.info.backend_pid
            racer = threading.Thread(
                target=lambda: done.update(
                    replay_dead(
                        replayer, policy=policy.name, failure_class="http_422", requested_by="a"
                    )
                )
            )
            racer.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                row = probe.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
                if row and row["wait_event_type"] == "Lock":
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the replay did not wait for the held row")
            free = []
            for key in keys[1:]:
                try:
                    with probe.transaction():
                        probe.execute("SET LOCAL lock_timeout = '100ms'")
                        probe.execute(lock_one, (key,))
                    free.append(key)
                except psycopg.errors.LockNotAvailable:
                    pass
            assert free == keys[1:], "the replay locked nothing past the row it waits for"
        racer.join(10)
    assert sorted(done["operation_keys"]) == keys


def test_dead_letters_command_lists_dead_operations(db, unique_name, sandbox, test_dsn) -> None:
    import subprocess
    import sys

    create_media_table(db, unique_name, 3)
    sandbox.state.configure(reject=["obj-2"])
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    work(test_dsn, policy, sandbox)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "retention.cli",
            "--dsn",
            test_dsn,
            "dead-letters",
            "--policy",
            policy.name,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "object=obj-2" in out
    assert "http_422 (HTTP 422)" in out
    assert "1 dead operation(s)" in out


def test_restored_object_is_not_deleted_by_an_old_operation(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 3)
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    db.execute(f"UPDATE public.{unique_name} SET version = 2 WHERE id = 2")  # noqa: S608
    work(test_dsn, policy, sandbox)
    assert sorted(sandbox.state.stats()["effects"]) == ["obj-1", "obj-3"]
    op = db.execute(
        "SELECT state, failure_class, attempt_count FROM retention.operations "
        "WHERE policy = %s AND object_id = 'obj-2'",
        (policy.name,),
    ).fetchone()
    assert op == {"state": "dead", "failure_class": "superseded", "attempt_count": 0}
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 1  # noqa: S608


def test_missing_tenant_is_never_sent_as_an_empty_path_segment(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 2)
    db.execute(f"ALTER TABLE public.{unique_name} ALTER COLUMN tenant_id DROP NOT NULL")
    db.execute(f"UPDATE public.{unique_name} SET tenant_id = NULL WHERE id = 1")  # noqa: S608
    policy = remote_policy(unique_name, endpoint="/v1/tenants/{tenant_id}/assets/{object_id}")
    enqueue_all(db, policy)
    work(test_dsn, policy, sandbox)
    assert [r["object"] for r in sandbox.state.stats()["requests"]] == ["obj-2"]
    assert states(db, policy) == {"dead": 1, "done": 1}
    assert count(db, f"SELECT count(*) FROM public.{unique_name} WHERE id = 1") == 1  # noqa: S608


def test_a_row_that_cannot_be_deleted_does_not_stall_its_batch(
    db, unique_name, sandbox, test_dsn
) -> None:
    create_media_table(db, unique_name, 5)
    db.execute(
        f"CREATE TABLE public.{unique_name}_child (parent bigint "
        f"REFERENCES public.{unique_name} (id) ON DELETE RESTRICT)"
    )
    db.execute(f"INSERT INTO public.{unique_name}_child VALUES (3)")  # noqa: S608
    # Left to the database on purpose: the run may start, and the referenced row resists.
    ignored = [{"constraint": f"{unique_name}_child_parent_fkey", "reason": "kept on purpose"}]
    policy = remote_policy(unique_name, ignore_foreign_keys=ignored)
    enqueue_all(db, policy)
    stats = work(test_dsn, policy, sandbox)
    assert stats["rows_deleted"] == 4
    failed = db.execute(
        "SELECT state, failure_class FROM retention.operations "
        "WHERE policy = %s AND object_id = 'obj-3'",
        (policy.name,),
    ).fetchone()
    assert failed == {"state": "dead", "failure_class": "local_delete_failed"}
    assert states(db, policy) == {"done": 4, "dead": 1}
    db.execute(f"DROP TABLE public.{unique_name}_child")


def test_a_hint_due_later_does_not_postpone_the_scan(db, unique_name) -> None:
    import datetime as dt

    from retention.events.hints import Hint, apply

    create_media_table(db, unique_name, 2)
    policy = remote_policy(unique_name)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=30)
    apply(db, Hint(f"msg_{unique_name}", policy, [("obj-1", later)]))
    assert enqueue_all(db, policy) == 2, "the scan makes the hinted operation due now"
    rows = db.execute(
        "SELECT object_id, not_before < now() + interval '1 minute' AS due_now, "
        "window_key IS NOT NULL AS in_window FROM retention.operations WHERE policy = %s "
        "ORDER BY object_id",
        (policy.name,),
    ).fetchall()
    assert rows == [
        {"object_id": "obj-1", "due_now": True, "in_window": True},
        {"object_id": "obj-2", "due_now": True, "in_window": True},
    ]


def sandbox_sender_nowhere():
    """A sender for tests that record outcomes without calling anything."""
    from retention.queue.http import plain_sender

    return plain_sender("http://127.0.0.1:9", 1)


def test_snooze_and_dead_letter_spend_no_attempt_and_done_needs_the_atomic_finish(
    db, unique_name
) -> None:
    import datetime as dt

    create_media_table(db, unique_name, 3)
    policy = remote_policy(unique_name)
    enqueue_all(db, policy)
    first, second, third = claim(db, policy, "w", 3)
    later = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    assert queue(policy).snooze(db, "w", first.key, later, "receiver busy")
    assert queue(policy).dead_letter(db, "w", second.key, "on_hold", "legal hold")
    assert not queue(policy).snooze(db, "someone-else", third.key, later, "stale")
    done = Finish(state=State.DONE, outcome=Outcome.CONFIRMED, status=204)
    with pytest.raises(ValueError, match="completed by their kind's own statement"):
        queue(policy).complete(db, "w", [(third.key, done)])
    rows = {
        r["operation_key"]: r
        for r in db.execute(
            "SELECT operation_key, state, attempt_count, not_before, failure_class "
            "FROM retention.operations WHERE policy = %s",
            (policy.name,),
        )
    }
    assert (rows[first.key]["state"], rows[first.key]["not_before"]) == ("pending", later)
    assert rows[first.key]["attempt_count"] == 0
    assert (rows[second.key]["state"], rows[second.key]["failure_class"]) == ("dead", "on_hold")
    assert rows[third.key]["state"] == "in_flight", "a refused completion changes nothing"
    assert count(db, f"SELECT count(*) FROM public.{unique_name}") == 3  # noqa: S608


def test_a_sender_error_hands_back_the_unstarted_jobs_at_once(
    db, unique_name, sandbox, test_dsn
) -> None:
    from retention.objects.deleter import work_operations
    from retention.queue.http import HttpResult

    class BreaksOnThird(OperationsKind):
        calls = 0

        def send(self, job):
            BreaksOnThird.calls += 1
            if BreaksOnThird.calls == 3:
                raise RuntimeError("unexpected client error")
            return HttpResult(204, started=time.time(), finished=time.time())

    create_media_table(db, unique_name, 5)
    policy = remote_policy(unique_name, claim_batch=5)
    enqueue_all(db, policy)
    with connect_dsn(test_dsn) as conn, pytest.raises(RuntimeError, match="unexpected"):
        work_operations(conn, BreaksOnThird(policy, sandbox_sender_nowhere()))
    # The job whose call began keeps its lease (the API may have acted on it);
    # the two never sent are pending again at once, not after their lease.
    assert states(db, policy) == {"done": 2, "in_flight": 1, "pending": 2}


def test_a_worker_does_not_call_a_job_whose_lease_it_lost(
    db, unique_name, sandbox, test_dsn
) -> None:
    """Between its calls the worker renews; a job someone reclaimed meanwhile is dropped."""
    from retention.objects.deleter import work_operations

    create_media_table(db, unique_name, 4)
    # Leases of 3 s renewed every 1 s (min(lease / 3, (lease - timeout) / 2)): the other
    # jobs' leases outlive a slow, loaded machine by seconds, not by a few hundred ms.
    policy = remote_policy(unique_name, request_timeout_seconds=0.3, lease_seconds=3, claim_batch=4)
    enqueue_all(db, policy)

    stolen: list[str] = []

    class StealsOneNotYetSent(OperationsKind):
        def send(self, job):
            # The claim does not order jobs due at the same moment, so the batch's order is
            # the table's; the first call (whichever job it is) is before every other, so
            # the job stolen while it runs is one the worker has not sent yet.
            if not stolen:
                (other,) = (
                    db.execute(
                        "SELECT object_id FROM retention.operations WHERE policy = %s "
                        "AND object_id <> %s ORDER BY object_id DESC LIMIT 1",
                        (policy.name, job.object_id),
                    )
                    .fetchone()
                    .values()
                )
                db.execute(
                    "UPDATE retention.operations SET lease_expires_at = now() - interval '1 s' "
                    "WHERE policy = %s AND object_id = %s",
                    (policy.name, other),
                )
                (taken,) = claim(db, policy, "thief", 1)
                assert taken.object_id == other
                stolen.append(other)
                time.sleep(1.1)  # past the renewal interval (1 s): the next renewal tells
            return super().send(job)

    with connect_dsn(test_dsn) as conn:
        kind = StealsOneNotYetSent(policy, sandbox_sender_nowhere_but(sandbox))
        stats = work_operations(conn, kind)
    called = sorted(r["object"] for r in sandbox.state.stats()["requests"])
    everyone = ["obj-1", "obj-2", "obj-3", "obj-4"]
    assert called == [o for o in everyone if o not in stolen], f"{stolen} was the thief's now"
    assert stats.lost_leases == 1
    owner = db.execute(
        "SELECT lease_owner FROM retention.operations WHERE policy = %s AND object_id = %s",
        (policy.name, stolen[0]),
    ).fetchone()
    assert owner == {"lease_owner": "thief"}


def sandbox_sender_nowhere_but(sandbox):
    from tests.support.remote import sandbox_sender

    return sandbox_sender(sandbox)
