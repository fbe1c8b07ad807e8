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
claimed by one worker at a time); a routine operation of the scope in another
worker's hands is waited for. Holds win: the delete statements keep held rows, the
rest of the scope goes, and once nothing is queued, an erasure whose every row left
is held ends ``blocked_by_hold``, naming what keeps them (the holds on those rows,
whatever they match, the ``hold_column``, the remote side). A final state writes
the receipt (``erasure_finish.sql``).

Its counts are kept as the deletions commit, never only in the pass's memory: each
batch of the row deleter adds its rows by table to the erasure in its own transaction
(``erasure_tally.sql``), and each finish of remote deletions adds the rows and child
rows it deleted to every open erasure whose scope holds them
(``erasure_tally_operations.sql``, whichever worker finishes them). A pass that fails
part-way, retried by the next, so reports everything the erasure deleted; ``passes``
counts the passes it took.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from retention.db.connection import Connection, bounded
from retention.db.gate import Gate, PauseSwitch
from retention.db.sqlfiles import query
from retention.erasures.request import ErasureState, Scope
from retention.holds.predicate import HOLD_POLICY_PARAM, held_row
from retention.objects.deleter import work_operations
from retention.objects.enqueue import enqueue_derivatives
from retention.objects.kind import ERASURE_CUTOFF, ObjectKind
from retention.policy.model import Policy
from retention.rows.children import CoupledTableError
from retention.rows.deleter import RowDeleter
from retention.rows.lifecycle import WindowResult
from retention.rows.target import TargetTable
from retention.rows.windows import Window
from retention.stopping import stop_requested, stoppable_sleep

log = logging.getLogger(__name__)

LOWEST_KEY, HIGHEST_KEY = -(2**63) + 1, 2**63 - 1
MAX_HOLDS_NAMED = 100  # holds keeping rows of one scope that a receipt names
OTHERS_POLL_SECONDS = 0.2  # how often a pass looks whether another worker finished its work


# Errors a pass cannot outlast by trying again: the statement, the data or the policy's
# tables are wrong (an unlisted foreign key, a missing column). Anything else (a lock, a
# timeout, a dropped connection, a remote side that is down) is retried by the next pass.
FINAL_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.IntegrityError,
    psycopg.ProgrammingError,
    psycopg.DataError,
    CoupledTableError,
)


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
    passes: int | None = None  # None: recorded before passes were counted

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
            "passes": self.passes,
        }


def blocking_holds(
    conn: Connection, policy: Policy, scope: Scope, value: str, rows: dict[str, Any]
) -> list[dict[str, Any]]:
    """What keeps the scope's rows that are still there, as the receipt names it.

    Each active hold on a row left (its key, tenant or object id, whatever the scope
    is: a key held inside an erased tenant is named) as ``{"id", "reason"}``; the
    policy's ``hold_column`` when it keeps rows, as ``{"id": "hold_column", "column",
    "rows", "reason"}``; and the remote side's own holds (``remote.held_statuses``
    answers) as ``{"id": "remote", "rows", "reason"}``. ``rows`` is the pass's
    ``erasure_scope_rows`` answer.
    """
    found: list[dict[str, Any]] = []
    if rows["rows_held"]:
        object_text = (
            sql.SQL("{}::text").format(sql.Identifier(policy.remote.object_id_column))
            if policy.remote is not None
            else sql.SQL("NULL::text")
        )
        with bounded(conn, policy.timeouts, timezone=policy.timestamp_timezone):
            holds = conn.execute(
                TargetTable.of(policy.table_spec, policy.remote).query(
                    "erasure_scope_holds",
                    scope_filter=scope_filter(policy, scope),
                    object_text=object_text,
                ),
                {"value": value, HOLD_POLICY_PARAM: policy.name, "limit": MAX_HOLDS_NAMED},
            ).fetchall()
        found = [{"id": row["hold_id"], "reason": row["reason"]} for row in holds]
    if rows["rows_held_by_column"]:
        found.append(
            {
                "id": "hold_column",
                "column": policy.hold_column,
                "rows": int(rows["rows_held_by_column"]),
                "reason": f"the row's {policy.hold_column} column says it is held",
            }
        )
    if rows["rows_held_remotely"]:
        found.append(
            {
                "id": "remote",
                "rows": int(rows["rows_held_remotely"]),
                "reason": "the remote side answered that it holds the object "
                "(remote.held_statuses); its operation waits in held",
            }
        )
    return found


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
            tally=partial(_tally_batch, erasure_id),  # each batch counted as it commits
        )
        window = scope_window(policy, erasure)
        result = WindowResult(window_key=window.window_key, label=window.label)
        deleter.delete(conn, window, policy.batch_rows, result, gate)
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
            enqueued = conn.execute(
                target.query("erasure_enqueue", scope_filter=scope_filter(policy, scope)), params
            ).fetchall()
            # each object's derivatives beside it; the promotion below makes them urgent
            enqueue_derivatives(conn, policy.remote, [r["operation_key"] for r in enqueued])
            conn.execute(
                query("erasure_promote", scope_filter=scope_filter(policy, scope, ledger=True)),
                params,
            )
        budget = budget_seconds or policy.remote.task_budget_seconds
        ledger = _work_urgent(conn, policy, open_kind, scope, params, gate, budget)
        objects = list(ledger["objects"])
        unfinished, dead = int(ledger["unfinished"]), int(ledger["dead"])
    by_column = _held_by_column(policy)
    with bounded(conn, policy.timeouts, timezone=policy.timestamp_timezone):
        left = conn.execute(
            TargetTable.of(policy.table_spec, policy.remote).query(
                "erasure_scope_rows",
                scope_filter=scope_filter(policy, scope),
                held_by_column=by_column,
            ),
            {"value": value, HOLD_POLICY_PARAM: policy.name},
        ).fetchone()
    assert left is not None
    rows_left, rows_held = int(left["rows_left"]), int(left["rows_held"])
    holds = blocking_holds(conn, policy, scope, value, left) if rows_held else []
    state, error = _verdict(
        rows_left=rows_left, rows_held=rows_held, unfinished=unfinished, dead=dead
    )
    row = conn.execute(
        query("erasure_finish"),
        {
            "erasure_id": erasure_id,
            "state": state.value,
            "zero_tables": json.dumps(zero_tables(policy)),
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
        "policy %s: erasure %d (%s %s): %s after %s pass(es); rows deleted %s, %d object(s), "
        "%d row(s) left%s",
        policy.name,
        erasure_id,
        scope.value,
        value,
        outcome.state.value,
        outcome.passes if outcome.passes is not None else "uncounted",
        outcome.rows_deleted,
        len(objects),
        rows_left,
        f", held by {[h['id'] for h in holds]}" if holds else "",
    )
    return outcome


def zero_tables(policy: Policy) -> dict[str, int]:
    """Every table an erasure of ``policy`` deletes from, each at 0: the policy's table, then
    each listed child's (as a run summary's ``rows_deleted_by_table`` names them), so a
    receipt names a table it deleted nothing from rather than leaving it out."""
    return {policy.table: 0, **{child.table: 0 for _, child in policy.child_tables()}}


def _tally_batch(erasure_id: int, conn: Connection, by_table: dict[str, int]) -> None:
    """Add one committed batch of the row deleter to the erasure's counts, inside the
    batch's own transaction (``erasure_tally.sql``)."""
    conn.execute(query("erasure_tally"), {"erasure_id": erasure_id, "by_table": Jsonb(by_table)})


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


def _held_by_column(policy: Policy) -> sql.Composable:
    """TRUE (else FALSE or NULL) when the policy's ``hold_column`` holds the row: the
    held-row predicate asked of that column alone (a NULL key matches no key hold)."""
    if not policy.hold_column:
        return sql.SQL("FALSE")
    return held_row(sql.SQL("NULL::bigint"), hold_column=sql.Identifier(policy.hold_column))


def _verdict(
    *, rows_left: int, rows_held: int, unfinished: int, dead: int
) -> tuple[ErasureState, str | None]:
    """The erasure's state after a pass (pure). Work still queued keeps it running (a
    final state writes the receipt, which must not miss what the queue still deletes);
    dead operations fail it; all gone is done; every row left held is blocked_by_hold
    (a hold wins); rows left that no hold keeps fail it."""
    if unfinished:
        return ErasureState.RUNNING, None
    if dead:
        return ErasureState.FAILED, (
            f"{dead} remote deletion(s) of the scope went dead; list them with "
            "`python -m retention.cli dead-letters`, replay them with retention__replay, "
            "then request the erasure again"
        )
    if not rows_left:
        return ErasureState.DONE, None
    if rows_held >= rows_left:
        return ErasureState.BLOCKED_BY_HOLD, None
    return ErasureState.FAILED, (
        f"{rows_left - rows_held} row(s) of the scope are still there with nothing queued "
        "for them and no hold keeping them (a row without an object id, or a row that "
        "stayed locked); `python -m retention.cli explain` on one of them says why"
    )


def _outcome(row: dict[str, Any]) -> ErasureOutcome:
    return ErasureOutcome(
        erasure_id=row["erasure_id"],
        state=ErasureState(row["state"]),
        rows_deleted=dict(row["rows_deleted"] or {}),
        objects=list(row["objects"] or []),
        blocking_holds=list(row["blocking_holds"] or []),
        error=row["error"],
        passes=row.get("passes"),
    )


def record_failed_pass(
    conn: Connection, policy: Policy, erasure_id: int, failed: Exception
) -> ErasureOutcome:
    """Record a pass that raised, so that one erasure's failure is its own, not its
    connection's: the next erasures of the pass go on.

    An error in :data:`FINAL_ERRORS` fails the erasure now (its receipt says what
    went before and why the rest did not); any other is recorded in its ``error``
    and the erasure stays open for the next pass, which tries again (its deadline's
    alert tells if it never gets through). A connection that is gone raises: the
    pass over that database is over.
    """
    if conn.closed or conn.broken:
        raise failed
    if conn.info.transaction_status is not TransactionStatus.IDLE:
        conn.rollback()
    error = f"{type(failed).__name__}: {failed}"[:2000]
    erasure = conn.execute(query("erasure_get"), {"erasure_id": erasure_id}).fetchone()
    if erasure is None:
        raise failed
    if not isinstance(failed, FINAL_ERRORS):
        row = conn.execute(
            query("erasure_pass_failed"), {"erasure_id": erasure_id, "error": error}
        ).fetchone()
        outcome = _outcome(row or erasure)
        outcome.error = error
        return outcome
    row = conn.execute(
        query("erasure_finish"),
        {
            "erasure_id": erasure_id,
            "state": ErasureState.FAILED.value,
            "zero_tables": json.dumps(zero_tables(policy)),
            "objects": json.dumps(erasure["objects"] or []),
            "blocking_holds": json.dumps(erasure["blocking_holds"] or []),
            "error": f"{error}; not retried: fix the cause, then request the erasure again",
            "notify": policy.notify is not None,
        },
    ).fetchone()
    outcome = _outcome(row or erasure)
    if row is not None:
        outcome.event_id = row["event_id"]
    return outcome


def late(erasure: dict[str, Any], now: dt.datetime) -> bool:
    """Not finished by its deadline: what the late-erasure alert fires on (pure)."""
    open_states = (ErasureState.REQUESTED, ErasureState.RUNNING)
    return ErasureState(erasure["state"]) in open_states and erasure["deadline"] < now
