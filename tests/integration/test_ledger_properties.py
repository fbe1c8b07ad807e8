"""Property-based test of the operation ledger under interleaved claimers (hypothesis).

Three workers claim, record outcomes, lose leases, get killed (they forget what
they held, releasing nothing) and see leases expire, in random orders chosen by
hypothesis, against the real Postgres. After every step:

- no operation is done twice, and its row was deleted exactly once;
- no operation is lost;
- ``attempt_count`` grows only by the real attempts that were recorded;
- a stale owner's result is never recorded over a newer owner's claim;
- a lease is only ever taken over once it has expired.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from retention.db.connection import connect_dsn
from retention.db.migrate import migrate
from retention.objects.enqueue import enqueue_window
from retention.objects.keys import Operation
from retention.objects.kind import OperationsKind
from retention.queue.classify import Outcome
from retention.queue.http import plain_sender
from retention.queue.leased import Finish, State
from retention.queue.worker import Attempt
from tests.support.policies import remote_policy
from tests.support.tables import count, create_media_table, plan

OPERATIONS = 6
WORKERS = ("w1", "w2", "w3")
OUTCOMES = {
    "done": Finish(state=State.DONE, outcome=Outcome.CONFIRMED, status=204),
    "retry": Finish(
        state=State.PENDING,
        outcome=Outcome.UNCERTAIN,
        status=500,
        failure_class="http_500",
        reason="HTTP 500",
        attempt_spent=1,
    ),
    "snooze": Finish(
        state=State.PENDING,
        outcome=Outcome.RATE_LIMITED,
        status=429,
        failure_class="rate_limited",
        reason="429",
        attempt_spent=0,
    ),
    "dead": Finish(
        state=State.DEAD,
        outcome=Outcome.REJECTED,
        status=422,
        failure_class="http_422",
        reason="HTTP 422",
    ),
}


def make_machine(dsn: str) -> type[RuleBasedStateMachine]:
    class Ledger(RuleBasedStateMachine):
        @initialize()
        def set_up(self) -> None:
            self.conn = connect_dsn(dsn)
            migrate(self.conn)
            self.name = f"t_prop_{uuid.uuid4().hex[:8]}"
            create_media_table(self.conn, self.name, OPERATIONS)
            self.policy = remote_policy(self.name, claim_batch=2, not_found_breaker=0)
            self.kind = OperationsKind(self.policy, plain_sender("http://127.0.0.1:9", 1))
            for window in plan(self.conn, self.policy):
                enqueue_window(self.conn, self.policy, window, 100)
            self.held: dict[str, dict[str, Operation]] = {w: {} for w in WORKERS}
            self.owner: dict[str, str | None] = {}  # key -> who holds its lease now
            self.attempts: dict[str, int] = {}  # key -> attempts the model expects
            self.done: set[str] = set()
            self.recorded_done: list[str] = []
            self.expired: set[str] = set()  # leases the model has let expire

        def teardown(self) -> None:
            if hasattr(self, "conn"):
                self.conn.execute(f"DROP TABLE IF EXISTS public.{self.name}")
                self.conn.close()

        @rule(worker=st.sampled_from(WORKERS), n=st.integers(1, 3))
        def claim(self, worker: str, n: int) -> None:
            for row in self.kind.queue.claim(self.conn, worker, n):
                op = Operation.from_row(row)
                assert op.key not in self.done, "a done operation was claimed again"
                if self.owner.get(op.key) is not None:
                    assert op.key in self.expired, "a lease was taken before it expired"
                self.expired.discard(op.key)
                self.owner[op.key] = worker  # the others may still think they hold it: stale
                self.held[worker][op.key] = op

        @rule(
            worker=st.sampled_from(WORKERS),
            outcome=st.sampled_from(sorted(OUTCOMES)),
            pick=st.integers(0, 10),
        )
        def record(self, worker: str, outcome: str, pick: int) -> None:
            mine = sorted(self.held[worker])
            if not mine:
                return
            key = mine[pick % len(mine)]
            op = self.held[worker].pop(key)
            finish = OUTCOMES[outcome]
            now = time.time()
            recorded = self.kind.record(self.conn, worker, [Attempt(op, finish, now, now)], None)
            accepted = recorded.rows_deleted
            current = self.owner.get(key) == worker
            assert (key in accepted) == current, "only the current lease owner can record"
            assert (key in recorded.finishes) == current
            if not current:
                return
            self.owner[key] = None
            self.expired.discard(key)
            self.attempts[key] = self.attempts.get(key, 0) + finish.attempt_spent
            if finish.state == "done":
                self.done.add(key)
                self.recorded_done.append(key)
                assert accepted[key] == 1, "the row went with the confirmation"

        @rule(worker=st.sampled_from(WORKERS))
        def kill(self, worker: str) -> None:
            self.held[worker].clear()  # it dies holding leases; nothing is released

        @rule()
        def expire_leases(self) -> None:
            self.expired |= {key for key, who in self.owner.items() if who is not None}
            self.conn.execute(
                "UPDATE retention.operations SET lease_expires_at = now() - interval '1 second' "
                "WHERE policy = %s AND state = 'in_flight'",
                (self.policy.name,),
            )

        @rule()
        def make_due(self) -> None:
            self.conn.execute(
                "UPDATE retention.operations SET not_before = now() "
                "WHERE policy = %s AND state = 'pending'",
                (self.policy.name,),
            )

        @invariant()
        def nothing_lost_nothing_twice(self) -> None:
            if not hasattr(self, "conn"):
                return
            rows = {
                r["operation_key"]: r
                for r in self.conn.execute(
                    "SELECT operation_key, state, attempt_count, lease_owner "
                    "FROM retention.operations WHERE policy = %s",
                    (self.policy.name,),
                )
            }
            assert len(rows) == OPERATIONS, "no operation is lost"
            assert len(self.recorded_done) == len(set(self.recorded_done)), "none done twice"
            assert {k for k, r in rows.items() if r["state"] == "done"} == self.done
            left = count(self.conn, f"SELECT count(*) FROM public.{self.name}")  # noqa: S608
            assert left == OPERATIONS - len(self.done), "each row deleted exactly once"
            for key, row in rows.items():
                assert row["attempt_count"] == self.attempts.get(key, 0), (
                    "attempt_count grows only by recorded real attempts"
                )
                if row["state"] == "in_flight":
                    assert row["lease_owner"] == self.owner.get(key), "the newest owner holds it"

    return Ledger


def test_the_ledger_keeps_its_promises_under_interleaved_claimers(test_dsn: str) -> None:
    machine: Any = make_machine(test_dsn)
    machine.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    machine.TestCase().runTest()
