"""The atomic finish of remote deletions, and what it falls back to when a row resists.

One ``ops_finish.sql`` statement records a batch: operations done, their local
rows deleted (of the version they were made for), the attempts written, and
each done operation's ``retention.deleted`` event inserted into the outbox;
the window's tally (``window_batch_done.sql``) commits in the same
transaction. Any kind of remote object (an HTTP API, an object store, a
folder) records through this, whatever its transport.

An object with derivatives (``remote.derivatives``) has one operation per
resource, and its row goes only with the confirmation of the last of them: the rule
is ``ops_finish_ready_resources.sql``, applied in the finish's own statement (every
resource the policy names confirmed, so an object enqueued before a derivative was
added waits for it), and :func:`all_resources_confirmed` states the same rule for
``explain``; the statement runs under each object's advisory lock
(``ops_lock_objects.sql``), so two workers confirming the last two resources of
one object at once cannot both leave the row.

A row that cannot be deleted never stalls its batch: if the batch's statement
fails, each outcome is recorded on its own, and a confirmed deletion whose
local delete fails goes dead (a foreign key, a trigger: it will fail again) or
stays confirmed with its local delete retried later (a lock, a deadlock: it
may work a moment later). :meth:`AtomicFinish.record` returns the
:class:`Recorded` batch: each key with the :class:`Finish` it was recorded as
(a fallback's, when one changed it), and each transaction's figures.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query, sql_text
from retention.holds.predicate import HOLD_POLICY_PARAM
from retention.objects.decide import held_finish
from retention.objects.keys import LOCAL_DELETE_PENDING
from retention.policy.model import Policy
from retention.queue.classify import Outcome
from retention.queue.leased import Finish, State
from retention.queue.worker import Attempt, Recorded
from retention.rows.children import FinishChildren, check_coupled_tables, finish_children
from retention.rows.locks import row_lock_holders
from retention.rows.target import TargetTable

log = logging.getLogger(__name__)

LOCAL_DELETE_RETRY_SECONDS = 30.0
LOCK_LOOKUP_REUSE_SECONDS = 10.0  # a lock holder lookup serves the rows after it this long
# A row that cannot be deleted for good: only these dead-letter a confirmed deletion.
PERMANENT_DELETE_ERRORS: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.ForeignKeyViolation,
    psycopg.errors.RestrictViolation,
    psycopg.errors.RaiseException,  # a trigger refused it
)
# A delete that may work a moment later: the confirmation is kept and the delete retried.
TRANSIENT_DELETE_ERRORS: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.LockNotAvailable,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
    psycopg.errors.QueryCanceled,
    psycopg.errors.OperationalError,
)


def all_resources_confirmed(states: dict[str, str], resources: Iterable[str]) -> bool:
    """Whether an object's row may go, as ``ops_finish_ready_resources.sql`` decides it:
    every resource the policy names (``resources``: the object itself, then each
    derivative) has an operation, and every operation of the object (``states``, by
    resource) is confirmed (``done``). A pending one is waited for; a dead one keeps
    the row until it is replayed and confirmed; a missing one until it is enqueued."""
    names = set(resources)
    return (
        bool(states)
        and names <= states.keys()
        and all(state == State.DONE for state in states.values())
    )


def objects_to_lock(policy: Policy, attempts: list[Attempt]) -> list[str]:
    """The objects a batch may finish, sorted (the lock order): none without derivatives,
    where each operation is its object's only resource and no lock is needed."""
    if policy.remote is None or not policy.remote.derivatives:
        return []
    return sorted({a.job.object_key for a in attempts if a.finish.state == State.DONE})


def finish_statement(policy: Policy, children: FinishChildren) -> sql.Composed:
    """``ops_finish.sql`` with the rule of when an operation finishes its object, and the
    policy's listed children deleted with its rows: a policy without derivatives keeps
    the statement it had (no read of the object's other resources, so its ledger rate
    does not fall)."""
    coupled = policy.remote is not None and bool(policy.remote.derivatives)
    rule = "ops_finish_ready_resources" if coupled else "ops_finish_ready_object"
    return TargetTable.of(policy.table_spec, policy.remote).query(
        "ops_finish",
        object_ready=sql.SQL(sql_text(rule)),
        gone_columns=children.gone_columns,
        children=children.children,
        child_tables=children.counts(sql.SQL("judged.op_row_key")),
        event_child_tables=children.counts(sql.SQL("ready.op_row_key")),
    )


def _after_local_delete_failed(finish: Finish, permanent: bool, what: str) -> Finish:
    """What a confirmed deletion whose local delete failed (``what``) is recorded as: dead
    as ``local_delete_failed`` when the failure will repeat (``permanent``), else still
    confirmed, with ``local_delete_pending`` and a retry time, so the next pass deletes
    the row without calling the remote again."""
    if permanent:
        return Finish(
            state=State.DEAD,
            outcome=finish.outcome,
            status=finish.status,
            failure_class="local_delete_failed",
            reason=f"the API confirmed the deletion but the local row cannot be deleted ({what})",
        )
    return Finish(
        state=State.PENDING,
        outcome=Outcome.CONFIRMED,
        status=finish.status,
        failure_class=LOCAL_DELETE_PENDING,
        reason=f"the API confirmed the deletion; the local delete failed for now ({what}) "
        "and is retried",
        not_before=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=LOCAL_DELETE_RETRY_SECONDS),
        attempt_spent=1,  # the call that confirmed was a real attempt
    )


class AtomicFinish:
    """Records a policy's remote-deletion outcomes, one bounded transaction per batch."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._holders_seen: tuple[float, int, str] | None = None  # see _lock_holders
        # Whether the last finish was waiting for its objects' advisory locks (another
        # worker finishing the same object) rather than a row: what a lock timeout means.
        self._waiting_for_objects = False
        # ops_finish.sql for this policy; with children, resolved against the catalog by
        # prepare(), before any remote call (see prepare).
        self._statement: sql.Composed | None = None

    def prepare(self, conn: Connection) -> None:
        """Resolve the policy's children against the catalog (which refuses a foreign key
        nobody accounts for): before the first remote call, so such a problem fails the
        task before the API deletes anything it could not record. Idempotent."""
        if self._statement is not None:
            return
        links = []
        if self.policy.children:
            with bounded(conn, self.policy.timeouts, reads=True):
                links = check_coupled_tables(conn, self.policy).links
        self._statement = finish_statement(self.policy, finish_children(links))

    def record(
        self, conn: Connection, owner: str, attempts: list[Attempt], scope: str | None
    ) -> Recorded:
        """The atomic finish of a batch; a row that cannot be deleted never stalls its batch.

        If the batch's statement fails (a foreign key, a trigger, a lock held
        past ``lock_timeout``), each outcome is recorded on its own, and one
        whose local delete fails is handled by :meth:`_local_delete_failed`.
        A lost connection records nothing: the leases expire and the calls are
        re-driven with the same keys.
        """
        try:
            return self._finish(conn, owner, attempts, scope)
        except psycopg.Error as failed:
            if conn.broken or conn.closed:
                raise
            if len(attempts) > 1:
                return self._one_by_one(conn, owner, attempts, scope)
            if not isinstance(failed, PERMANENT_DELETE_ERRORS + TRANSIENT_DELETE_ERRORS):
                raise  # a setup problem (privileges, a dropped column): fail loudly, keep nothing
            permanent = isinstance(failed, PERMANENT_DELETE_ERRORS)
            return self._local_delete_failed(conn, owner, attempts[0], scope, permanent, failed)

    def _one_by_one(
        self, conn: Connection, owner: str, attempts: list[Attempt], scope: str | None
    ) -> Recorded:
        finishes: dict[str, Finish] = {}
        rows_deleted: dict[str, int] = {}
        transactions: list[tuple[int, float]] = []
        by_table: dict[str, int] = {}
        for attempt in attempts:
            one = self.record(conn, owner, [attempt], scope)
            finishes.update(one.finishes)
            rows_deleted.update(one.rows_deleted)
            transactions.extend(one.transactions)
            for table, rows in one.rows_by_table.items():
                by_table[table] = by_table.get(table, 0) + rows
        return Recorded(
            finishes=finishes,
            rows_deleted=rows_deleted,
            transactions=transactions,
            rows_by_table=by_table,
        )

    def _lock_holders(self, conn: Connection, row_key: int) -> str:
        """Who holds the lock a local delete timed out on, looked up at most once per
        ``LOCK_LOOKUP_REUSE_SECONDS``: behind a table lock every row of a batch times
        out in turn, and each lookup would cost another wait."""
        now = time.monotonic()
        if self._holders_seen is not None:
            seen_at, seen_row, text = self._holders_seen
            if now - seen_at < LOCK_LOOKUP_REUSE_SECONDS:
                return f"; as looked up for row {seen_row} {now - seen_at:.0f} s ago: {text}"
        text = row_lock_holders(conn, self.policy.table_spec, row_key)
        self._holders_seen = (now, row_key, text)
        return f"; {text}"

    def _local_delete_failed(
        self,
        conn: Connection,
        owner: str,
        attempt: Attempt,
        scope: str | None,
        permanent: bool,
        error: psycopg.Error,
    ) -> Recorded:
        """A confirmed deletion whose local delete failed: dead for good, or retried.

        A foreign key or a trigger refusing the delete will refuse it again:
        the operation goes dead as ``local_delete_failed``. A lock timeout, a
        deadlock, a serialization failure or a cancel is transient: the operation
        stays confirmed with ``local_delete_pending`` and the next pass deletes
        the row without calling the remote again. Any other error (privileges, a
        changed schema) fails the task instead. A lost connection records
        nothing at all: the lease expires and the call is re-driven with the
        same key, which the remote answers as already done.
        """
        if attempt.finish.state != State.DONE:
            raise error
        what = f"{type(error).__name__}: {error}".strip()[:200]
        change = _after_local_delete_failed(attempt.finish, permanent, what)
        log.warning(
            "row %s: local delete %s after the API confirmed: %s%s (operation %s)",
            attempt.job.row_key,
            "failed for good" if permanent else "failed for now, retried later",
            what,
            self._what_was_waited_for(conn, attempt, error),
            attempt.job.key,
        )
        retry = Attempt(attempt.job, change, attempt.started, attempt.finished)
        return self._finish(conn, owner, [retry], scope)

    def _what_was_waited_for(self, conn: Connection, attempt: Attempt, error: psycopg.Error) -> str:
        """For a lock timeout, the log line's note of the lock it waited for: an object's
        advisory lock (another worker finishing the same object) is not a row lock, and
        blaming a row's holders for it would send the reader after the wrong session."""
        if not isinstance(error, psycopg.errors.LockNotAvailable):
            return ""
        if self._waiting_for_objects:
            return (
                "; the wait was for the object's advisory lock (another worker finishing a "
                "resource of the same object), not for a row lock"
            )
        return self._lock_holders(conn, attempt.job.row_key)

    def _finish(
        self, conn: Connection, owner: str, attempts: list[Attempt], scope: str | None
    ) -> Recorded:
        """One ``ops_finish.sql`` statement, and the window's tally, in one bounded transaction.

        The tally (``window_batch_done.sql``) commits with the deletions it
        counts, so a window's figures never disagree with the table; the batch
        time it records is this transaction's, and so is the one returned.
        """
        self.prepare(conn)  # a no-op once the pass has (before its first call)
        began = time.perf_counter()
        with bounded(
            conn,
            self.policy.timeouts,
            synchronous_commit=False,
            timezone=self.policy.timestamp_timezone,
        ):
            self._lock_objects(conn, attempts)
            rows = self._run_finish_statement(conn, owner, attempts)
            rows_deleted = {row["op_key"]: int(row["rows_deleted"]) for row in rows}
            held = self._settle_rows_left_alone(conn, rows)
            deleted = sum(rows_deleted.values())
            by_table = self._rows_by_table(rows, deleted)
            self._count_toward_erasures(conn, attempts, rows)
            elapsed_ms = (time.perf_counter() - began) * 1000
            if scope is not None and rows_deleted:
                self._tally_window(conn, scope, deleted, elapsed_ms, by_table)
        return Recorded(
            finishes={
                a.job.key: held.get(a.job.key, a.finish)
                for a in attempts
                if a.job.key in rows_deleted
            },
            rows_deleted=rows_deleted,
            transactions=[(deleted, elapsed_ms)] if rows_deleted else [],
            rows_by_table=by_table,
        )

    def _lock_objects(self, conn: Connection, attempts: list[Attempt]) -> None:
        """Take the advisory lock of each object the batch may finish (``ops_lock_objects.sql``,
        in :func:`objects_to_lock`'s order), so two workers confirming an object's last two
        resources cannot both leave its row; while waiting, a lock timeout is the object's
        (see :meth:`_what_was_waited_for`)."""
        if objects := objects_to_lock(self.policy, attempts):
            self._waiting_for_objects = True
            conn.execute(query("ops_lock_objects"), {"keys": objects}, prepare=True)
        self._waiting_for_objects = False

    def _run_finish_statement(
        self, conn: Connection, owner: str, attempts: list[Attempt]
    ) -> list[dict[str, Any]]:
        """The batch's ``ops_finish.sql`` (resolved by :meth:`prepare`): one row per operation
        it recorded, with the rows it deleted, whether it left the row alone and the
        children it deleted by table. One statement, one array per column, so a batch is one
        round trip and commits or fails whole."""
        statement = self._statement
        assert statement is not None
        return conn.execute(
            statement, self._finish_params(owner, attempts), prepare=True
        ).fetchall()

    def _finish_params(self, owner: str, attempts: list[Attempt]) -> dict[str, Any]:
        """``ops_finish.sql``'s parameters: the policy's, then each attempt's finish as one
        array per column (the statement unnests them side by side)."""
        utc = dt.UTC
        return {
            "owner": owner,
            "policy": self.policy.name,
            "resources": list(self.policy.remote.resources) if self.policy.remote else [],
            "notify": self.policy.notify is not None,
            "keys": [a.job.key for a in attempts],
            "states": [a.finish.state for a in attempts],
            "attempt_spent": [a.finish.attempt_spent for a in attempts],
            "rate_limited": [a.finish.rate_limited for a in attempts],
            "auth_failure": [a.finish.auth_failure for a in attempts],
            "not_before": [a.finish.not_before for a in attempts],
            "status": [a.finish.status for a in attempts],
            "outcome": [a.finish.outcome for a in attempts],
            "failure_class": [a.finish.failure_class for a in attempts],
            "reason": [a.finish.reason[:300] for a in attempts],
            "started_at": [dt.datetime.fromtimestamp(a.started, utc) for a in attempts],
            "finished_at": [dt.datetime.fromtimestamp(a.finished, utc) for a in attempts],
            "duration_ms": [(a.finished - a.started) * 1000 for a in attempts],
            "table_name": self.policy.table,
            HOLD_POLICY_PARAM: self.policy.name,
        }

    def _settle_rows_left_alone(
        self, conn: Connection, rows: list[dict[str, Any]]
    ) -> dict[str, Finish]:
        """Of the confirmed operations whose row the statement left alone, mark those whose
        row is held as ``held`` (:meth:`_held_rows`) and the others superseded (their row
        changed before its local delete: ``ops_mark_superseded.sql``), in the finish's
        transaction, so none stays done with its row still there. Returns the held ones'
        finishes, which replace what the batch was recorded as."""
        left_alone = [row["op_key"] for row in rows if row["row_left_alone"]]
        held = self._held_rows(conn, left_alone)
        left_alone = [key for key in left_alone if key not in held]
        if left_alone:
            conn.execute(query("ops_mark_superseded"), {"keys": left_alone})
            log.warning(
                "%d confirmed deletion(s) left their row alone: it changed before its "
                "local delete (superseded): %s",
                len(left_alone),
                left_alone[:5],
            )
        return held

    def _rows_by_table(self, rows: list[dict[str, Any]], deleted: int) -> dict[str, int]:
        """What the batch deleted by table: the policy's table, then each listed child."""
        by_table = {self.policy.table: deleted}
        for row in rows:
            for table, count in row["child_tables"].items():
                by_table[table] = by_table.get(table, 0) + int(count)
        return by_table

    def _tally_window(
        self,
        conn: Connection,
        scope: str,
        deleted: int,
        elapsed_ms: float,
        by_table: dict[str, int],
    ) -> None:
        """Add the batch to its window's figures (``window_batch_done.sql``) in the finish's
        transaction, so the window never disagrees with the table; by table only with
        children (a table without them has one figure, its own)."""
        conn.execute(
            query("window_batch_done"),
            {
                "window_key": scope,
                "deleted": deleted,
                "batch_ms": elapsed_ms,
                "by_table": Jsonb(by_table if self.policy.children else {}),
            },
            prepare=True,
        )

    def _count_toward_erasures(
        self, conn: Connection, attempts: list[Attempt], rows: list[dict[str, Any]]
    ) -> None:
        """Add what this batch deleted (each operation's row and its listed children, by
        table) to the open erasures whose scope holds the row (``erasure_tally_operations.sql``),
        in the finish's transaction: an erasure's receipt counts every table it deleted
        from, whichever worker deleted it, and keeps what a pass committed before it failed.
        A batch that deleted nothing, or of a policy with no open erasure, writes nothing."""
        jobs = {a.job.key: a.job for a in attempts}
        counted: list[tuple[Any, str, int]] = []  # (operation, table, rows), rows > 0
        for row in rows:
            job = jobs.get(row["op_key"])
            tables = {self.policy.table: int(row["rows_deleted"])}
            for table, count in row["child_tables"].items():
                tables[table] = tables.get(table, 0) + int(count)
            if job is not None:
                counted += [(job, table, n) for table, n in tables.items() if n]
        if not counted:
            return
        probe = conn.execute(query("erasure_open_of_policy"), {"policy": self.policy.name})
        if not (found := probe.fetchone()) or not found["open"]:
            return  # no erasure to count toward: the usual case, one cheap probe
        conn.execute(
            query("erasure_tally_operations"),
            {
                "policy": self.policy.name,
                "row_keys": [str(job.row_key) for job, _, _ in counted],
                "tenants": [job.tenant for job, _, _ in counted],
                "object_ids": [job.object_id for job, _, _ in counted],
                "table_names": [table for _, table, _ in counted],
                "rows": [n for _, _, n in counted],
            },
            prepare=True,
        )

    def _held_rows(self, conn: Connection, left_alone: list[str]) -> dict[str, Finish]:
        """Of confirmed operations whose row ``ops_finish.sql`` left alone, those whose row
        is held (a hold placed after the screen): put in ``held`` instead of superseded, in
        the caller's transaction (``ops_mark_held_rows.sql``); returns their finishes."""
        if not left_alone:
            return {}
        target = TargetTable.of(self.policy.table_spec, self.policy.remote)
        marked = conn.execute(
            target.query("ops_mark_held_rows"),
            {"keys": left_alone, HOLD_POLICY_PARAM: self.policy.name},
        ).fetchall()
        if marked:
            log.warning(
                "%d confirmed deletion(s) kept their row: a hold placed before the local "
                "delete holds it (the remote object is gone; the operation waits in held): %s",
                len(marked),
                [row["operation_key"] for row in marked][:5],
            )
        reason = "the API confirmed the deletion; a hold keeps the row"
        return {row["operation_key"]: held_finish(reason) for row in marked}
