"""Working one erasure: every row and object of its scope, whatever its age, now.

An erasure deletes through the policy's own machinery, so whatever a deletion
means for the policy (held rows skipped, child tables, derivative objects) means
the same for it:

- a policy without ``remote`` deletes the scope's rows with its
  :class:`~retention.rows.deleter.RowDeleter`, over a window that covers the
  scope with no cutoff (an erasure ignores ``retain_days``);
- a remote policy upserts one **urgent** operation per row of the scope into
  the operations ledger, under the keys the scheduled scan derives (a routine
  operation already pending for a row becomes urgent: one ledger row, one remote
  effect), and works them with the shared worker, limiter and atomic finish; the
  claim takes urgent operations first, so they go ahead of any routine backlog
  under the same rate limit.

It takes no run lease: a routine run may hold it, and their deletes are
idempotent (a row deleted by one is not there for the other; an operation is
claimed by one worker at a time). Holds win: the holds that match the scope are
named, the rest of the scope goes, and the erasure ends ``blocked_by_hold``.
A final state writes the receipt (``erasure_finish.sql``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from retention.db.connection import Connection, bounded
from retention.db.gate import Gate, PauseSwitch
from retention.db.sqlfiles import query
from retention.erasures.request import ErasureState, Scope
from retention.holds.store import matching_holds
from retention.objects.deleter import work_operations
from retention.objects.kind import ERASURE_CUTOFF, ObjectKind
from retention.policy.model import Policy
from retention.rows.deleter import RowDeleter
from retention.rows.lifecycle import WindowResult
from retention.rows.target import TargetTable
from retention.rows.windows import Window
from retention.stopping import stop_requested, stoppable_sleep

log = logging.getLogger(__name__)

LOWEST_KEY, HIGHEST_KEY = -(2**63) + 1, 2**63 - 1
MAX_HELD_OBJECTS_NAMED = 20  # held objects whose holds a receipt looks up and names
OTHERS_POLL_SECONDS = 0.2  # how often a pass looks whether another worker finished its work


class ErasureNotFound(LookupError):
    """No erasure with that id (of that policy)."""


@dataclass
class ErasureOutcome:
    """How one pass over an erasure ended (its state is final unless ``running``)."""

    erasure_id: int
    state: ErasureState
    rows_deleted: dict[str, int] = field(default_factory=dict)
    objects: list[str] = field(default_factory=list)
    blocking_holds: list[dict[str, Any]] = field(default_factory=list)
    rows_left: int = 0
    error: str | None = None
    event_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "erasure_id": self.erasure_id,
            "state": self.state.value,
            "rows_deleted": self.rows_deleted,
            "objects": self.objects,
            "blocking_holds": self.blocking_holds,
            "rows_left": self.rows_left,
            "error": self.error,
            "event_id": self.event_id,
        }


def blocking_holds(conn: Connection, policy: str, scope: Scope, value: str) -> list[dict[str, Any]]:
    """The active holds that match the scope itself (id and reason of each): a tenant
    erasure names the holds on that tenant, a key's or an object's those on it. Rows a
    narrower hold keeps (a key held inside an erased tenant) are kept by the delete
    statements all the same, and the erasure's counts show what went."""
    match = {Scope.TENANT: "tenant", Scope.KEY: "key", Scope.OBJECT: "object_id"}[scope]
    holds = matching_holds(conn, policy, **{match: value})
    return [{"id": hold.hold_id, "reason": hold.reason} for hold in holds]


def scope_filter(policy: Policy, scope: Scope, *, ledger: bool = False) -> sql.Composable:
    """The scope as a condition on the policy's table (or on the operations ledger)."""
    if ledger:
        column = {Scope.TENANT: "tenant", Scope.KEY: "row_key", Scope.OBJECT: "object_id"}[scope]
        cast = "bigint" if scope is Scope.KEY else "text"
        return sql.SQL("{} = %(value)s::{}").format(sql.Identifier(column), sql.SQL(cast))
    if scope is Scope.TENANT:
        assert policy.tenant_column is not None
        return sql.SQL("{}::text = %(value)s").format(sql.Identifier(policy.tenant_column))
    if scope is Scope.KEY:
        return sql.SQL("{} = %(value)s::bigint").format(sql.Identifier(policy.key_column))
    assert policy.remote is not None
    return sql.SQL("{}::text = %(value)s").format(sql.Identifier(policy.remote.object_id_column))


def scope_window(policy: Policy, erasure: dict[str, Any]) -> Window:
    """The scope as a window of the row deleter: no cutoff, the tenant's or the key's range.

    Its key is the erasure's, which names no row of ``retention.windows``: the
    erasure's own row is its ledger.
    """
    scope = Scope(erasure["scope"])
    first, last = LOWEST_KEY, HIGHEST_KEY
    if scope is Scope.KEY:
        first = last = int(erasure["value"])
    return Window(
        policy=policy.name,
        run_id=f"erasure:{erasure['erasure_id']}",
        plan_id=f"erasure:{erasure['erasure_id']}",
        window_no=0,
        tenant_scope="one" if scope is Scope.TENANT else "all",
        tenant=erasure["value"] if scope is Scope.TENANT else None,
        cutoff=ERASURE_CUTOFF,
        first_id=first,
        last_id=last,
        expected_rows=0,
    )


def process_erasure(
    conn: Connection,
    policy: Policy,
    erasure_id: int,
    *,
    open_kind: Callable[[], ObjectKind] | None = None,
    budget_seconds: float | None = None,
    switch: PauseSwitch | None = None,
) -> ErasureOutcome:
    """One pass over an erasure; a remote policy needs ``open_kind`` (its transport)."""
    erasure = conn.execute(query("erasure_get"), {"erasure_id": erasure_id}).fetchone()
    if erasure is None or erasure["policy"] != policy.name:
        raise ErasureNotFound(f"no erasure {erasure_id} of policy {policy.name!r}")
    if ErasureState(erasure["state"]) not in (ErasureState.REQUESTED, ErasureState.RUNNING):
        return _outcome(erasure)
    conn.execute(query("erasure_start"), {"erasure_id": erasure_id})
    scope, value = Scope(erasure["scope"]), erasure["value"]
    holds = blocking_holds(conn, policy.name, scope, value)
    rows_deleted = dict(erasure["rows_deleted"] or {})
    objects: list[str] = []
    unfinished = dead = 0
    gate = Gate(
        policy.name, policy.health, policy.table_spec, switch, label=f"erasure {erasure_id}"
    )
    if policy.remote is None:
        deleter = RowDeleter(
            policy.table_spec,
            policy.timeouts,
            policy.batch_timing,
            policy.health,
            switch=switch,
            policy=policy,  # its listed children go with each row, as in a routine window
        )
        window = scope_window(policy, erasure)
        result = WindowResult(window_key=window.window_key, label=window.label)
        deleter.delete(conn, window, policy.batch_rows, result, gate)
        by_table = result.rows_by_table or {policy.table: result.rows_deleted}
        for table, deleted in {policy.table: 0, **by_table}.items():
            rows_deleted[table] = rows_deleted.get(table, 0) + deleted
    else:
        assert open_kind is not None, "a remote policy's erasure needs its transport"
        target = TargetTable.of(policy.table_spec, policy.remote)
        params = {
            "policy": policy.name,
            "revision": policy.revision,
            "table_name": policy.table,
            "value": value,
            "requested_at": erasure["requested_at"],
        }
        with bounded(conn, policy.timeouts, timezone=policy.timestamp_timezone):
            conn.execute(
                target.query("erasure_enqueue", scope_filter=scope_filter(policy, scope)), params
            )
        budget = budget_seconds or policy.remote.task_budget_seconds
        ledger = _work_urgent(conn, policy, open_kind, scope, params, gate, budget)
        objects = list(ledger["objects"])
        unfinished, dead = int(ledger["unfinished"]), int(ledger["dead"])
        for object_id in list(ledger["held_objects"])[:MAX_HELD_OBJECTS_NAMED]:
            # a hold on one object inside a tenant's or key's scope: name it too
            for hold in blocking_holds(conn, policy.name, Scope.OBJECT, object_id):
                if hold not in holds:
                    holds.append(hold)
        rows_deleted[policy.table] = int(ledger["done"])
    with bounded(conn, policy.timeouts, timezone=policy.timestamp_timezone):
        left = conn.execute(
            TargetTable.of(policy.table_spec).query(
                "erasure_scope_rows", scope_filter=scope_filter(policy, scope)
            ),
            {"value": value},
        ).fetchone()
    rows_left = int(left["rows_left"]) if left else 0
    state, error = _verdict(
        holds=bool(holds), rows_left=rows_left, unfinished=unfinished, dead=dead
    )
    row = conn.execute(
        query("erasure_finish"),
        {
            "erasure_id": erasure_id,
            "state": state.value,
            "rows_deleted": json.dumps(rows_deleted),
            "objects": json.dumps(objects),
            "blocking_holds": json.dumps(holds),
            "error": error,
            "notify": policy.notify is not None,
        },
    ).fetchone()
    outcome = _outcome(row) if row is not None else _outcome(erasure)
    outcome.rows_left = rows_left
    if row is not None:
        outcome.event_id = row["event_id"]
    log.info(
        "policy %s: erasure %d (%s %s): %s; rows deleted %s, %d object(s), %d row(s) left%s",
        policy.name,
        erasure_id,
        scope.value,
        value,
        outcome.state.value,
        rows_deleted,
        len(objects),
        rows_left,
        f", held by {[h['id'] for h in holds]}" if holds else "",
    )
    return outcome


def _work_urgent(
    conn: Connection,
    policy: Policy,
    open_kind: Callable[[], ObjectKind],
    scope: Scope,
    params: dict[str, Any],
    gate: Gate,
    budget_seconds: float,
) -> dict[str, Any]:
    """Work urgent operations until the scope's are finished or the budget is spent.

    Another worker (a routine drain, which also claims urgent operations first) may
    hold some of them; the pass then waits for those to finish instead of ending
    ``running`` with its work in someone else's hands.
    """
    statement = query("erasure_operations", scope_filter=scope_filter(policy, scope, ledger=True))
    deadline = time.monotonic() + budget_seconds
    with closing(open_kind()) as kind:
        kind.queue = kind.queue.urgent()  # this erasure's pass, never the routine backlog
        while True:
            left = max(0.1, deadline - time.monotonic())
            work_operations(conn, kind, budget_seconds=left, gate=gate)
            ledger = conn.execute(statement, params).fetchone()
            assert ledger is not None
            if not ledger["unfinished"] or time.monotonic() >= deadline or stop_requested():
                return ledger
            stoppable_sleep(min(OTHERS_POLL_SECONDS, max(0.0, deadline - time.monotonic())))


def _verdict(
    *, holds: bool, rows_left: int, unfinished: int, dead: int
) -> tuple[ErasureState, str | None]:
    """The erasure's state after a pass (pure): a hold wins; all gone is done; work still
    queued keeps it running; rows left with nothing queued, or dead operations, fail it."""
    if holds:
        return ErasureState.BLOCKED_BY_HOLD, None
    if unfinished:
        return ErasureState.RUNNING, None
    if dead:
        return ErasureState.FAILED, (
            f"{dead} remote deletion(s) of the scope went dead; list them with "
            "`python -m retention.cli dead-letters`, replay them with retention__replay, "
            "then request the erasure again"
        )
    if rows_left:
        return ErasureState.FAILED, (
            f"{rows_left} row(s) of the scope are still there with nothing queued for them "
            "(a row without an object id, a hold on part of the scope, or a row that stayed "
            "locked); `python -m retention.cli explain` on one of them says why"
        )
    return ErasureState.DONE, None


def _outcome(row: dict[str, Any]) -> ErasureOutcome:
    return ErasureOutcome(
        erasure_id=row["erasure_id"],
        state=ErasureState(row["state"]),
        rows_deleted=dict(row["rows_deleted"] or {}),
        objects=list(row["objects"] or []),
        blocking_holds=list(row["blocking_holds"] or []),
        error=row["error"],
    )


def late(erasure: dict[str, Any], now: dt.datetime) -> bool:
    """Not finished by its deadline: what the late-erasure alert fires on (pure)."""
    open_states = (ErasureState.REQUESTED, ErasureState.RUNNING)
    return ErasureState(erasure["state"]) in open_states and erasure["deadline"] < now
