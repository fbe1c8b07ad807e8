"""One run at a time per policy: the run lease in ``retention.run_leases``.

``max_active_runs=1`` on the DAG does not stop overlapping runs: ``airflow
backfill create`` runs up to ten at once unless told otherwise, and a cleared
task of an old run can run next to a new one. Overlapping runs of one policy
delete each other's rows, and each then reports numbers that describe neither.

So a run takes the policy's lease before its first deletion and reconcile
gives it back. While another run holds it, the run waits (the DAG's
``take_run_lease`` sensor reschedules itself, holding no worker slot). A
holder whose DAG run has ended without giving it back (marked failed,
killed before reconcile) is taken over: its windows left ``running`` are
closed as ``cancelled`` and it gets a partial summary, so nothing stays open
forever. Whether a DAG run has ended is Airflow's answer (``run_state``), not a
timeout, because a healthy run can wait hours for pool slots.

Waiting runs take turns in the order of their cutoffs (for runs of one policy, the
order of their logical dates), not in the order their sensors happen to look: a
backfill's older dates go first, so each run deletes its own slice instead of
finding it already deleted by a later date. Each look records the run in
``retention.run_lease_waiters`` (its :class:`Turn` and when it last looked); when
the lease is free only the first live waiter may take it. A waiter that stopped
looking (:data:`STALE_WAITER_POKES` pokes) or whose DAG run has ended is passed over.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.runs.status import StoppedFacts, run_status
from retention.summary import RunStatus, RunSummary, day

log = logging.getLogger(__name__)

ENDED_STATES = frozenset({"success", "failed"})
"""DAG run states after which a run can hold nothing (None: the run no longer exists)."""

TAKEOVER_GRACE_SECONDS = 30.0
"""How long an ended holder's windows still ``running`` get before they are taken over.

Marking a run failed ends the DAG run at once, while its tasks are told to stop
only at their next heartbeat (``[workers] min_heartbeat_interval``, 5 s) and
are killed 5 s after that. Their last batch must not overlap the next run's."""

STALE_WAITER_POKES = 6
"""A waiter that has not looked for this many of its pokes has vanished (its sensor was
stopped or marked done by hand) and is passed over; one whose DAG run ended is passed
over at once. Six pokes leave room for a loaded scheduler that reschedules late."""

RunState = Callable[[str], str | None]
"""The state of a DAG run of this policy's DAG by run id (None if there is none)."""


@dataclass(frozen=True)
class Turn:
    """A run's place in the line for the lease: the earlier cutoff goes first (then the
    earlier logical date, then the smaller run id)."""

    cutoff: dt.datetime
    logical_date: dt.datetime | None = None


@dataclass(frozen=True)
class Waiter:
    """A run waiting for the lease ahead of the one asking."""

    run_id: str
    cutoff: dt.datetime
    logical_date: dt.datetime | None

    @property
    def named(self) -> str:
        """``run X (logical date D)``, or ``run X (cutoff C)`` for a run without a date."""
        when = (
            f"logical date {day(self.logical_date)}"
            if self.logical_date
            else f"cutoff {day(self.cutoff)}"
        )
        return f"run {self.run_id} ({when})"


@dataclass(frozen=True)
class LeaseOutcome:
    """What one attempt to take the lease found and did (one XCom value)."""

    taken: bool
    run_id: str
    holder: str | None = None  # the other run holding it, when not taken
    holder_state: str | None = None
    holder_since: dt.datetime | None = None
    took_over: str | None = None  # an ended run whose lease this run took
    closed_windows: list[str] = field(default_factory=list)
    stopping_windows: int = 0  # an ended holder's windows still running: not taken yet
    grace_seconds: float = TAKEOVER_GRACE_SECONDS
    ahead: Waiter | None = None  # a waiting run that goes first (the lease is takeable)
    coming: str | None = None  # an earlier run of the DAG that has not looked yet: it goes first

    def message(self, policy: str) -> str:
        if not self.taken and self.ahead is not None:
            return (
                f"policy {policy}: the run lease can be taken, but {self.ahead.named} "
                f"waits for it and goes first; run {self.run_id} waits its turn. Waiting "
                "runs take the lease in the order of their cutoffs (their logical dates), "
                "so each deletes its own days."
            )
        if not self.taken and self.coming is not None:
            return (
                f"policy {policy}: the run lease can be taken, but run {self.coming} of an "
                "earlier logical date is running and has not looked for it yet (a backfill "
                f"starts its runs together); run {self.run_id} lets it go first."
            )
        if not self.taken:
            since = f" since {self.holder_since:%Y-%m-%d %H:%M:%S}Z" if self.holder_since else ""
            if self.stopping_windows:
                return (
                    f"policy {policy}: run {self.holder} holds the run lease{since}; its DAG "
                    f"run is {self.holder_state} but {self.stopping_windows} of its windows "
                    "may still be stopping: run "
                    f"{self.run_id} takes it over {self.grace_seconds:g} s after it first saw "
                    "that run ended. Runs of one policy never overlap."
                )
            return (
                f"policy {policy}: run {self.holder} holds the run lease{since} "
                f"(its DAG run is {self.holder_state}); run {self.run_id} waits for it to "
                "finish. Runs of one policy never overlap."
            )
        if self.took_over:
            return (
                f"policy {policy}: run {self.run_id} took the run lease over from run "
                f"{self.took_over}, whose DAG run ended ({self.holder_state or 'gone'}) "
                f"without reconcile; closed {len(self.closed_windows)} window(s) it left running"
            )
        return f"policy {policy}: run {self.run_id} holds the run lease"

    def as_dict(self) -> dict[str, Any]:
        return {
            "taken": self.taken,
            "holder": self.holder,
            "holder_state": self.holder_state,
            "took_over": self.took_over,
            "closed_windows": len(self.closed_windows),
            "stopping_windows": self.stopping_windows,
            "ahead": self.ahead.run_id if self.ahead else None,
            "coming": self.coming,
        }


def take_run_lease(
    conn: Connection,
    policy: str,
    dag_id: str,
    run_id: str,
    run_state: RunState,
    grace_seconds: float = TAKEOVER_GRACE_SECONDS,
    *,
    turn: Turn | None = None,
    waits: bool = False,
    earlier: str | None = None,
    stale_seconds: float = 60.0,
) -> LeaseOutcome:
    """Take the policy's run lease for ``run_id`` if it is free, already this run's, or
    held by a run that has ended (and whose windows had ``grace_seconds`` to stop), and
    no live waiter goes before ``turn``; otherwise report who holds it, or who goes first.

    ``waits``: the caller is the ``take_run_lease`` sensor, which looks again later: the
    run is recorded as a waiter (its ``turn``) at every look. ``earlier`` is a running run
    of the DAG with an earlier logical date whose sensor has not looked yet (Airflow's
    answer): a backfill starts its runs together, and the first to look must not go first
    for that alone, so the waiter lets it join, for at most ``stale_seconds``. A caller
    without a ``turn`` goes after every live waiter. Waiters that have not looked for
    ``stale_seconds``, or whose DAG run ended, are passed over.

    Every window task asks, and the run already holds it then: that answer is one
    read, never a write to (or a lock on) the policy's one lease row.
    """
    seen_holder = lease_holder(conn, policy)
    if seen_holder == run_id:  # a later task of the holding run, a retry
        return LeaseOutcome(taken=True, run_id=run_id)
    run_state = states_asked_before_locking(
        conn, policy, run_id, turn, run_state, stale_seconds, seen_holder
    )
    with conn.transaction():
        row = conn.execute(query("run_lease_hold"), {"policy": policy, "dag_id": dag_id}).fetchone()
        assert row is not None
        holder: str | None = row["run_id"]
        if holder == run_id:  # taken by this run since the read above
            return LeaseOutcome(taken=True, run_id=run_id)
        waited = 0.0
        if waits and turn is not None:
            beat = conn.execute(
                query("run_lease_waiter_beat"),
                {
                    "policy": policy,
                    "run_id": run_id,
                    "dag_id": dag_id,
                    "cutoff": turn.cutoff,
                    "logical_date": turn.logical_date,
                },
            ).fetchone()
            assert beat is not None
            waited = float(beat["waited_seconds"])
        state = None
        if holder is not None:
            state = run_state(holder)
            if state is not None and state not in ENDED_STATES:
                conn.execute(query("run_lease_unsettle"), {"policy": policy})
                return LeaseOutcome(
                    taken=False,
                    run_id=run_id,
                    holder=holder,
                    holder_state=state,
                    holder_since=row["taken_at"],
                )
            settling = conn.execute(
                query("run_lease_settling"), {"policy": policy, "grace": grace_seconds}
            ).fetchone()
            assert settling is not None
            if settling["running_windows"] and not settling["settled"]:
                return LeaseOutcome(
                    taken=False,
                    run_id=run_id,
                    holder=holder,
                    holder_state=state or "gone",
                    holder_since=row["taken_at"],
                    stopping_windows=int(settling["running_windows"]),
                    grace_seconds=grace_seconds,
                )
        ahead, gone = first_waiter_ahead(conn, policy, run_id, turn, run_state, stale_seconds)
        if gone:
            conn.execute(query("run_lease_waiter_leave"), {"policy": policy, "run_ids": gone})
        if ahead is not None:
            return LeaseOutcome(taken=False, run_id=run_id, ahead=ahead)
        if waits and earlier is not None and waited < stale_seconds:
            return LeaseOutcome(taken=False, run_id=run_id, coming=earlier)
        took_over = holder
        conn.execute(
            query("run_lease_take"),
            {"policy": policy, "dag_id": dag_id, "run_id": run_id, "taken_over": took_over},
        )
        conn.execute(query("run_lease_waiter_leave"), {"policy": policy, "run_ids": [run_id]})
        closed = close_stale_windows(
            conn,
            policy,
            except_run=run_id,
            reason=f"its task ended without closing it; closed when run {run_id} started",
        )
        for ended in sorted({r for _, r in closed} | ({took_over} if took_over else set())):
            record_stopped_run(
                conn,
                policy,
                ended,
                f"the DAG run ended before reconcile; closed when run {run_id} took the lease",
            )
    outcome = LeaseOutcome(
        taken=True,
        run_id=run_id,
        holder_state=state,
        took_over=took_over,
        closed_windows=[k for k, _ in closed],
    )
    log.info(outcome.message(policy))
    return outcome


def states_asked_before_locking(
    conn: Connection,
    policy: str,
    run_id: str,
    turn: Turn | None,
    run_state: RunState,
    stale_seconds: float,
    holder: str | None,
) -> RunState:
    """Airflow's answers for the holder and the waiters ahead, asked before the lease row
    is locked, as the ``run_state`` to use under the lock.

    Asking Airflow is a network call that can take seconds; under the row lock every other
    poller of the policy would queue behind it. An answer a few milliseconds old is as
    good as one read under the lock (Airflow's states do not follow our lock either). A
    run that became the holder or a waiter between these reads and the lock is asked
    under the lock, as before.
    """
    known: dict[str, str | None] = {}

    def answered_or_ask(other_run: str) -> str | None:
        if other_run not in known:
            known[other_run] = run_state(other_run)
        return known[other_run]

    if holder is not None:
        state = answered_or_ask(holder)
        if state is not None and state not in ENDED_STATES:
            return answered_or_ask  # a running holder keeps it: the waiters are not read
    # The same walk as under the lock, so it asks about the same waiters: up to the first
    # live one, not every waiter in the line.
    first_waiter_ahead(conn, policy, run_id, turn, answered_or_ask, stale_seconds)
    return answered_or_ask


def first_waiter_ahead(
    conn: Connection,
    policy: str,
    run_id: str,
    turn: Turn | None,
    run_state: RunState,
    stale_seconds: float,
) -> tuple[Waiter | None, list[str]]:
    """The first live waiter that goes before ``turn`` (None: this run is first), and the
    waiters ahead of it whose DAG run has ended or is gone (to be forgotten)."""
    rows = conn.execute(
        query("run_lease_waiter_ahead"),
        {
            "policy": policy,
            "run_id": run_id,
            "cutoff": turn.cutoff if turn else None,
            "logical_date": turn.logical_date if turn else None,
            "stale_seconds": stale_seconds,
        },
    ).fetchall()
    gone: list[str] = []
    for row in rows:
        state = run_state(row["run_id"])
        if state is None or state in ENDED_STATES:
            gone.append(row["run_id"])
            continue
        return Waiter(row["run_id"], row["cutoff"], row["logical_date"]), gone
    return None, gone


def release_run_lease(conn: Connection, policy: str, run_id: str) -> bool:
    """Give the lease back if ``run_id`` holds it (True); a no-op otherwise."""
    with conn.transaction():
        released = conn.execute(
            query("run_lease_release"), {"policy": policy, "run_id": run_id}
        ).fetchone()
    return released is not None


def lease_holder(conn: Connection, policy: str) -> str | None:
    """The run holding the policy's run lease now (None: nobody). One read, no lock."""
    row = conn.execute(query("run_lease_holder"), {"policy": policy}).fetchone()
    return row["run_id"] if row else None


def holds_run_lease(conn: Connection, policy: str, run_id: str) -> str | None:
    """None when ``run_id`` may work now (it holds the lease, or nobody does); else the
    run that holds it."""
    holder = lease_holder(conn, policy)
    return None if holder in (None, run_id) else holder


def close_stale_windows(
    conn: Connection,
    policy: str,
    *,
    reason: str,
    only_run: str | None = None,
    except_run: str | None = None,
) -> list[tuple[str, str]]:
    """Close windows left ``running`` (of ``only_run``, or of every run but ``except_run``)
    as ``cancelled``; return their (window key, run id)."""
    rows = conn.execute(
        query("window_close_stale"),
        {"policy": policy, "reason": reason, "only_run": only_run, "except_run": except_run},
    ).fetchall()
    for row in rows:
        log.warning(
            "policy %s: window %s of run %s was left running; closed as cancelled",
            policy,
            row["window_key"],
            row["run_id"],
        )
    return [(row["window_key"], row["run_id"]) for row in rows]


def record_stopped_run(conn: Connection, policy: str, run_id: str, reason: str) -> bool:
    """Give a run that stopped before reconcile a partial summary (status ``cancelled``
    once none of its windows still runs: :func:`run_status` decides; the SQL records).

    The run's row is locked first (``run_stopped_lock.sql``) and its facts read after
    (``run_stopped_facts.sql``), so two stops of one run record in turn and the later one
    counts what the earlier one left. A reconciled run keeps its summary (False); a later
    reconcile of this run replaces the partial one with the full count.

    A run an earlier stop cancelled whose window runs again (a retried task) keeps
    ``cancelled`` while its ``finished_at`` turns NULL (it works again), as the single
    statement that recorded a stop always did; its next stop, or its reconcile, closes it.
    """
    params = {"policy": policy, "run_id": run_id}
    with conn.transaction():
        if conn.execute(query("run_stopped_lock"), params).fetchone() is None:
            return False  # reconciled (or never planned): nothing to close
        facts = conn.execute(query("run_stopped_facts"), params).fetchone()
        if facts is None:  # the row is locked and unreconciled: its facts cannot be missing
            raise RuntimeError(
                f"run {run_id!r} of policy {policy!r}: its row is locked but its facts were "
                "not read (run_stopped_facts.sql and run_stopped_lock.sql disagree)"
            )
        running = int(facts["windows_running"])
        status = run_status(
            StoppedFacts(windows_running=running, recorded=RunStatus(facts["status"]))
        )
        summary = RunSummary.stopped(
            policy=facts["policy"],
            dag_id=facts["dag_id"],
            run_id=facts["run_id"],
            plan_id=facts["plan_id"],
            table=facts["table_name"],
            status=status,
            reason=reason,
            dry_run=bool(facts["dry_run"]),
            cutoff=facts["cutoff_json"],
            windows_by_state={k: int(n) for k, n in facts["windows_by_state"].items()},
            rows_planned=facts["rows_planned"],
            rows_deleted_by_windows=int(facts["rows_deleted_by_windows"]),
            rows_deleted_by_drain=int(facts["rows_deleted_by_drain"]),
            rows_counted=facts["rows_counted"],
            stopped_at=facts["stopped_at_json"],
        )
        row = conn.execute(
            query("run_record_stopped"),
            {
                **params,
                "status": status.value,
                # finished once none of its windows still runs (NULL while one works)
                "finished_at": None if running else facts["stopped_at"],
                "windows": summary.windows,
                "rows_deleted": summary.rows_deleted,
                "summary": Jsonb(summary.to_json()),
            },
        ).fetchone()
    return row is not None
