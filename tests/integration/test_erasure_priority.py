"""Urgent operations go ahead of a routine backlog in the same limiter scope.

Measured where it matters, at the sandbox API on loopback: the order in which the
calls arrived. The worker, the bucket and the rate are the routine ones; only the
operations' priority differs.
"""

from __future__ import annotations

import threading
import time

from psycopg import sql

from retention.db.connection import connect_dsn
from retention.objects.deleter import work_operations
from retention.objects.kind import OperationsKind
from retention.queue.leased import OPERATIONS, State, _claim_statement
from tests.support.policies import remote_policy
from tests.support.remote import enqueue_all, sandbox_sender
from tests.support.tables import count, create_media_table

BACKLOG = 20_050  # 401 tenants of 50 rows each
TENANTS = 401
ERASED_TENANT = 7


def drain_in_background(test_dsn: str, policy, sandbox, stop: threading.Event) -> threading.Thread:
    """Routine draining passes, one after another, until told to stop."""
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            with connect_dsn(test_dsn) as conn:
                kind = OperationsKind(policy, sandbox_sender(sandbox))
                while not stop.is_set():
                    work_operations(conn, kind, budget_seconds=0.5)
        except BaseException as exc:  # surfaced by the test
            errors.append(exc)

    thread = threading.Thread(target=loop, daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def test_urgent_operations_finish_before_a_tenth_of_the_routine_backlog(
    db, unique_name, sandbox, test_dsn
):
    create_media_table(db, unique_name, BACKLOG, tenants=TENANTS)
    policy = remote_policy(unique_name, rate_per_second=2000, burst=50, claim_batch=50)
    sandbox.state.configure(rate=5000, burst=500)
    assert enqueue_all(db, policy, batch_rows=5000, window_rows=100_000) == BACKLOG
    erased = {
        f"obj-{r['id']}"
        for r in db.execute(
            sql.SQL("SELECT id FROM {} WHERE tenant_id = %s").format(
                sql.Identifier("public", unique_name)
            ),
            (ERASED_TENANT,),
        )
    }
    assert len(erased) == 50

    stop = threading.Event()
    thread = drain_in_background(test_dsn, policy, sandbox, stop)
    try:
        while len(sandbox.state.stats()["requests"]) < 200:  # the drain is under way
            time.sleep(0.01)
        # what an erasure does to its scope's operations: they become urgent and due now
        db.execute(
            "UPDATE retention.operations SET priority = 'urgent', not_before = now() "
            "WHERE policy = %s AND tenant = %s AND state = 'pending'",
            (policy.name, str(ERASED_TENANT)),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            effects = sandbox.state.stats()["effects"]
            if erased <= set(effects):
                break
            time.sleep(0.02)
    finally:
        stop.set()
        thread.join(30)
    assert not thread.errors, thread.errors  # type: ignore[attr-defined]

    requests = [r for r in sandbox.state.stats()["requests"] if r["status"] == 204]
    last_erased = max(i for i, r in enumerate(requests) if r["object"] in erased)
    routine_before = sum(1 for r in requests[: last_erased + 1] if r["object"] not in erased)
    assert routine_before < BACKLOG // 10, (
        f"{routine_before} routine deletions went ahead of the last urgent one "
        f"(of a backlog of {BACKLOG})"
    )
    assert (
        count(
            db,
            "SELECT count(*) FROM retention.operations WHERE policy = %s AND tenant = %s "
            "AND state = 'done'",
            policy.name,
            str(ERASED_TENANT),
        )
        == 50
    )


def _claim_plan(db, policy_name: str) -> dict:
    """The executed plan of an urgent-only claim of pending operations (rolled back)."""
    statement = _claim_statement(OPERATIONS, State.PENDING, scoped=False, urgent_only=True)
    params = {
        "policy": policy_name,
        "owner": "plan-probe",
        "lease_seconds": 60,
        "scope": None,
        "state": State.PENDING,
        "n": 50,
    }
    with db.transaction(force_rollback=True):
        explained = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement
        return db.execute(explained, params).fetchone()["QUERY PLAN"][0]["Plan"]


def _rows_removed_by_filter(plan: dict) -> int:
    return plan.get("Rows Removed by Filter", 0) + sum(
        _rows_removed_by_filter(child) for child in plan.get("Plans", [])
    )


def test_an_urgent_only_claim_never_reads_the_routine_backlog(db, unique_name):
    """An erasure's pass after its last urgent operation must not walk the routine backlog.

    Its claim runs every pass; read through the whole backlog it would cost a scan of
    every routine pending operation of the policy, each time, while the erasure waits.
    """
    db.execute(
        "INSERT INTO retention.operations (operation_key, policy, policy_revision, table_name, "
        "row_key, object_id, version, priority, not_before) "
        "SELECT %(policy)s || '-' || g, %(policy)s, 1, 'media', g, 'obj-' || g, 'v1', "
        "CASE WHEN g <= 3 THEN 'urgent' ELSE 'routine' END, now() - interval '1 minute' "
        "FROM generate_series(1, 20000) AS g",
        {"policy": unique_name},
    )
    db.execute("ANALYZE retention.operations")
    try:
        plan = _claim_plan(db, unique_name)
        removed = _rows_removed_by_filter(plan)
        assert removed < 100, f"the urgent claim read {removed} routine operations: {plan}"
    finally:
        db.execute("DELETE FROM retention.operations WHERE policy = %s", (unique_name,))
