"""A remote policy's ledger in a known state, for the Retention view's tests.

``seed_remote_ledger`` runs the real pipeline (plan, enqueue, one worker pass
against the sandbox API, reconcile) and then sets the few figures a short test
cannot produce by waiting (an operation pending for two hours, 429 answers a
few minutes and two hours ago, one dead event, a closed limiter) with plain
statements, so that every figure the view shows has a known value.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from retention.db.connection import Connection
from retention.evidence.reconcile import reconcile_run
from retention.policy import Policy, parse_policy
from tests.support.policies import policy_fields, remote_fields
from tests.support.remote import enqueue_all, work
from tests.support.tables import create_media_table, plan

OBJECTS = 12
REJECTED = ("obj-1", "obj-2")  # the sandbox answers 422: dead, failure class http_422
HELD = ("obj-3", "obj-4")  # left pending, created two hours ago
RECENT_429S = 3  # answered five minutes ago
OLD_429S = 1  # answered two hours ago: outside the last hour
PENDING_AGE = dt.timedelta(hours=2)
NOTIFY = {"http_conn_id": "ui_receiver", "endpoint": "/hooks/retention"}


@dataclass(frozen=True)
class SeededLedger:
    """What was seeded, as the view should show it."""

    policy: Policy
    done: int
    dead_keys: list[str]
    pending: int
    events_pending: int
    events_dead: int
    run_id: str


def seed_remote_ledger(
    db: Connection, dsn: str, policy: Policy, sandbox: Any, *, close_limiter: bool = True
) -> SeededLedger:
    """Seed ``policy`` (a remote policy with notify, see :data:`NOTIFY`) as described above."""
    assert policy.remote is not None
    create_media_table(db, policy.table.split(".")[1], OBJECTS)
    plan(db, policy, run_id="run-0", plan_id="run-0@a")  # an older run: not the last one
    sandbox.state.configure(reject=list(REJECTED))
    enqueue_all(db, policy)  # run-1
    db.execute(
        "UPDATE retention.operations SET not_before = now() + interval '1 day', "
        "created_at = now() - %s WHERE policy = %s AND object_id = ANY(%s)",
        (PENDING_AGE, policy.name, list(HELD)),
    )
    work(dsn, policy, sandbox)
    reconcile_run(db, policy, "run-1")
    key = db.execute(
        "SELECT operation_key FROM retention.operations WHERE policy = %s AND state = 'done' "
        "ORDER BY operation_key LIMIT 1",
        (policy.name,),
    ).fetchone()
    assert key is not None
    for n, age in enumerate([dt.timedelta(minutes=5)] * RECENT_429S + [PENDING_AGE] * OLD_429S):
        db.execute(
            "INSERT INTO retention.attempts (operation_key, attempt_no, policy, lease_owner, "
            "started_at, finished_at, status_code, outcome_class, duration_ms) "
            "VALUES (%s, %s, %s, 'seed', now() - %s, now() - %s, 429, 'rate_limited', 1)",
            (key["operation_key"], 100 + n, policy.name, age, age),
        )
    db.execute(
        "UPDATE retention.outbox SET state = 'dead', failure_class = 'http_410' "
        "WHERE event_id = (SELECT min(event_id) FROM retention.outbox WHERE policy = %s)",
        (policy.name,),
    )
    if close_limiter:
        db.execute("SELECT retention.throttle_scope(%s, 600)", (policy.remote.scope,))
    dead = db.execute(
        "SELECT operation_key FROM retention.operations WHERE policy = %s AND state = 'dead' "
        "ORDER BY operation_key",
        (policy.name,),
    ).fetchall()
    done = OBJECTS - len(REJECTED) - len(HELD)
    return SeededLedger(
        policy=policy,
        done=done,
        dead_keys=[row["operation_key"] for row in dead],
        pending=len(HELD),
        events_pending=done - 1,
        events_dead=1,
        run_id="run-1",
    )


def seeded_remote_policy(
    db: Connection, dsn: str, name: str, sandbox: Any
) -> tuple[dict[str, Any], SeededLedger]:
    """A remote policy with ``notify:`` (its fields, as a policies file holds them) and its
    ledger seeded by :func:`seed_remote_ledger`."""
    fields = policy_fields(
        name,
        window_rows=10_000,
        batch_rows=500,
        window_per_tenant=False,
        remote=remote_fields(name),
        notify=NOTIFY,
    )
    policy, problems = parse_policy(name, fields)
    assert policy is not None, problems
    return fields, seed_remote_ledger(db, dsn, policy, sandbox)
