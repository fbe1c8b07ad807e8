"""The partition fast path: expired partitions are detached (and dropped), not deleted row by row.

When a row policy's table is range-partitioned on its timestamp column alone
(declarative partitioning), a partition that holds only rows the row deletes
would delete can go whole. The rules, in the order they apply:

1. **Which partitions are expired.** A direct partition whose upper bound is
   at or before the cutoff, the bound cast to the column's type and compared
   with the cutoff as the deletes compare rows (in ``timestamp_timezone`` for
   ``timestamp`` and ``date`` keys). Bounds are compared as values: every
   statement that reads them runs with ``DateStyle`` ISO and ``IntervalStyle``
   postgres set for its transaction (:func:`reading_bounds`), so a database
   whose default DateStyle is ``SQL, DMY`` decides the same. The default
   partition, ``MAXVALUE`` bounds and partitions that straddle the cutoff are
   left to the windows, as is any table not partitioned that way.
2. **DST gaps** (``timestamp`` and ``date`` keys only). Near a forward change
   of the zone's UTC offset, a wall-clock value below the upper bound can read
   as later than the bound. Such a partition goes only when its upper bound is
   at or before ``cutoff − G``, G being the zone's largest offset change
   (:func:`largest_offset_change`), or when it holds no row that reads as at or
   after the cutoff (``partition_young_rows.sql``: the rows' largest value as
   the deletes read them is below the cutoff). Otherwise it is left to the rows.
3. **Dependencies.** A partition that a view reads, that a foreign key
   references, or that a publication carries (itself or through its parent) is
   left to the row path, which lets the key act and whose deletes replicate.
   So is a partition holding a row a legal hold keeps (``partition_held_rows.sql``):
   the row path deletes its other rows and keeps the held ones. A policy that lists
   ``children:`` never takes the fast path: its child rows go with their parents in
   each batch, and a dropped partition would orphan a child without a constraint.
4. **Detach.** ``DETACH PARTITION … CONCURRENTLY`` when the table has no
   default partition, else a plain detach bounded by ``lock_timeout``; a
   detach left pending by an interrupted ``CONCURRENTLY`` that this package
   began (a record of the policy with the table's oid) is finished
   (``FINALIZE``) whatever rules 2 and 3 would say (it was checked when it
   began, and cannot be undone); one it did not begin is left alone (action
   ``rows``, state ``left``) and reconcile names it while it stays pending. A
   lock held on the table fails the task at ``lock_timeout``, nothing detached
   (or the detach pending, when ``CONCURRENTLY``'s second phase gave up; the
   next run's finishing pass finishes it). Any other detach error leaves the
   partition attached (``not_detached``) for the windows.
5. **Drop.** Unless ``partitions: detach_only``, the detached table is
   dropped, in one transaction that locks it, checks that its name still
   resolves to the oid recorded before the detach and that it is not a
   partition of anything, drops it and records ``dropped``. A table that cannot
   be dropped (a view created meanwhile, a lock) keeps its record
   ``detached`` with the error; the run goes on to its windows and reconcile
   names the table and makes the run dirty until it is gone.

The evidence (``retention.partition_drops``) is written before the DDL and
moved on with it: a plain detach (and a ``FINALIZE``) records ``detached`` in
its own transaction; ``CONCURRENTLY`` cannot run in one, so the record follows
it. Every run first, before anything that may return early,
finishes what earlier attempts left (:func:`finish_interrupted_drops`): a
pending detach this package began, a
``started`` record whose table exists and is no longer attached, and a
``detached`` one whose drop failed. What it finds decides
(:func:`finishing_verdict`): it drops only the very table it detached, and
marks a record ``abandoned``, with the reason, when the name now means another
table or the table was renamed or attached again. Remote policies never take
this path: each of their rows names an object that needs its own API call.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg import sql

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query
from retention.holds.store import list_holds
from retention.policy.model import Policy
from retention.rows.locks import ALL_MODES, SHARE_UPDATE_EXCLUSIVE_CONFLICTS, table_lock_holders

log = logging.getLogger(__name__)

TS_TYPES = {
    "timestamp with time zone": "timestamptz",
    "timestamp without time zone": "timestamp",
    "date": "date",
}
ZONE_READ_TYPES = frozenset({"timestamp without time zone", "date"})
"""Key types whose values are wall-clock times, read in the policy's ``timestamp_timezone``."""

UNKNOWN = "unknown"
MAX_ERROR = 500


class PartitionDropError(RuntimeError):
    """A partition could not be detached; the message says what is left."""


@dataclass(frozen=True)
class ExpiredPartition:
    """A partition whose upper bound is at or before the cutoff."""

    schema: str
    name: str
    table_oid: int
    bounds: str
    estimated_rows: int | None  # None: never analysed, and counting it timed out
    detach_pending: bool
    clear_of_gap: bool = True  # upper bound at or before cutoff − G (rule 2)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "partition": self.qualified,
            "bounds": self.bounds,
            "estimated_rows": rows_figure(self.estimated_rows),
        }


def rows_figure(rows: int | None) -> int | str:
    """A row figure for evidence: the number, or "unknown" (never 0 for "no idea")."""
    return UNKNOWN if rows is None else rows


@dataclass(frozen=True)
class Layout:
    """Whether the fast path applies to a table, and if not, why."""

    applies: bool
    has_default: bool = False
    why_not: str | None = None


@contextmanager
def reading_bounds(conn: Connection, policy: Policy) -> Iterator[None]:
    """A read transaction bounded by the policy's timeouts, in its ``timestamp_timezone``,
    with ``DateStyle`` ISO and ``IntervalStyle`` postgres (``SET LOCAL``): partition bounds
    are printed by ``pg_get_expr`` in the session's DateStyle and read back as values, and
    only ISO prints a value that always reads back as the same value."""
    with bounded(conn, policy.timeouts, reads=True, timezone=policy.timestamp_timezone):
        conn.execute(
            "SELECT set_config('DateStyle', 'ISO, YMD', true),"
            " set_config('IntervalStyle', 'postgres', true)"
        )
        yield


def partition_layout(conn: Connection, policy: Policy) -> Layout:
    """Range-partitioned on the timestamp column alone, or why the fast path does not apply."""
    table = policy.table_spec
    with reading_bounds(conn, policy):
        row = conn.execute(
            query("partition_layout"), {"schema": table.schema, "table": table.name}
        ).fetchone()
    if row is None:
        return Layout(False, why_not="not partitioned")
    if row["strategy"] != "r" or list(row["key_columns"]) != [table.timestamp_column]:
        return Layout(
            False,
            why_not=f"partitioned by {row['key_columns']} (strategy {row['strategy']!r}), "
            f"not by range of {table.timestamp_column} alone",
        )
    return Layout(True, has_default=bool(row["has_default"]))


_OFFSET_CHANGES: dict[str, dt.timedelta] = {}


def largest_offset_change(conn: Connection, policy: Policy, column_type: str) -> dt.timedelta:
    """G of rule 2: the largest change of ``timestamp_timezone``'s UTC offset in the
    server's time zone data (``partition_zone_offset_change.sql``); zero for a ``timestamptz``
    key, whose values are instants. Asked once per zone and process."""
    if column_type not in ZONE_READ_TYPES:
        return dt.timedelta(0)
    zone = policy.timestamp_timezone
    if zone not in _OFFSET_CHANGES:
        with reading_bounds(conn, policy):
            row = conn.execute(query("partition_zone_offset_change"), {"zone": zone}).fetchone()
        assert row is not None
        _OFFSET_CHANGES[zone] = dt.timedelta(seconds=float(row["seconds"]))
    return _OFFSET_CHANGES[zone]


def expired_partitions(
    conn: Connection,
    policy: Policy,
    cutoff: dt.datetime,
    column_type: str,
    gap: dt.timedelta = dt.timedelta(0),
) -> list[ExpiredPartition]:
    """The partitions whose upper bound is at or before the cutoff (rule 1), each marked
    with whether its bound is also at or before ``cutoff − gap`` (rule 2). Row figures come
    from the statistics, or from a count when the statistics have none."""
    table = policy.table_spec
    statement = query("partition_expired", ts_type=sql.SQL(TS_TYPES[column_type]))
    with reading_bounds(conn, policy):
        rows = conn.execute(
            statement,
            {
                "schema": table.schema,
                "table": table.name,
                "cutoff": cutoff,
                "gap_seconds": gap.total_seconds(),
            },
        ).fetchall()
    return [
        ExpiredPartition(
            r["schema_name"],
            r["partition_name"],
            int(r["table_oid"]),
            r["bounds"],
            _row_figure(conn, policy, r["schema_name"], r["partition_name"], r["reltuples"]),
            bool(r["detach_pending"]),
            bool(r["clear_of_gap"]),
        )
        for r in rows
    ]


def _row_figure(
    conn: Connection, policy: Policy, schema: str, name: str, reltuples: float
) -> int | None:
    """The statistics' row count; counted when they have none (``reltuples`` is -1 for a
    table never analysed on PostgreSQL 14+, 0 on 13 and for an empty table, whose count
    costs nothing), within ``plan_statement_timeout_ms``; None when the count timed out."""
    if reltuples > 0:
        return round(reltuples)
    try:
        with bounded(conn, policy.timeouts, reads=True):
            row = conn.execute(
                query("partition_count", partition=sql.Identifier(schema, name))
            ).fetchone()
    except psycopg.errors.QueryCanceled:
        log.warning(
            "policy %s: %s.%s was never analysed and could not be counted within "
            "plan_statement_timeout_ms; its rows are shown as unknown",
            policy.name,
            schema,
            name,
        )
        return None
    return int(row["n"]) if row else None


def why_left_to_rows(
    conn: Connection,
    policy: Policy,
    partition: ExpiredPartition,
    cutoff: dt.datetime,
    column_type: str,
    gap: dt.timedelta,
) -> str | None:
    """Why an expired partition must go through the windows instead (rules 2 and 3), or
    None when it may be detached."""
    with bounded(conn, policy.timeouts, reads=True):
        found = [
            r["found"]
            for r in conn.execute(query("partition_dependents"), {"oid": partition.table_oid})
        ]
    if found:
        return (
            f"in use by {', '.join(found)}: dropping it would break or bypass "
            f"{'them' if len(found) > 1 else 'it'}, so its rows are deleted row by row"
        )
    if (held := _held_rows(conn, policy, partition.schema, partition.name)) is not None:
        return held
    if partition.clear_of_gap:
        return None
    zone = policy.timestamp_timezone
    statement = query(
        "partition_young_rows",
        partition=sql.Identifier(partition.schema, partition.name),
        ts=sql.Identifier(policy.table_spec.timestamp_column),
        ts_type=sql.SQL(TS_TYPES[column_type]),
    )
    try:
        with reading_bounds(conn, policy):
            row = conn.execute(
                statement, {"cutoff": cutoff, "gap_seconds": gap.total_seconds()}
            ).fetchone()
    except psycopg.errors.QueryCanceled:
        return (
            f"its upper bound is within {_hours(gap)} (the largest offset change of {zone}) "
            "of the cutoff, and whether it holds rows newer than the cutoff could not be "
            "read within plan_statement_timeout_ms (no index on the timestamp column?)"
        )
    if row and row["young"]:
        return (
            f"it holds rows that read as at or after the cutoff in {zone} (wall-clock times "
            f"at a change of the zone's UTC offset, up to {_hours(gap)}), which the row "
            "deletes keep"
        )
    return None


def _held_rows(conn: Connection, policy: Policy, schema: str, table: str) -> str | None:
    """Why a partition must go through the rows because of a legal hold (rule 3b), or None.

    Only asked when a hold could apply (an active hold of the policy or of every policy
    on a key or a tenant, or a ``hold_column``), so the common case reads nothing of the
    partition; key and tenant holds are looked up through the partition's indexes, and
    only a ``hold_column`` is a scan. A read that cannot finish in time also leaves the
    partition to the rows.
    """
    holds = list_holds(conn, policy.name, include_lifted=False)
    keys = [k for h in holds if h.match == "key" and -(2**63) <= (k := int(h.value)) < 2**63]
    tenant_column = policy.table_spec.tenant_column
    tenants = [h.value for h in holds if h.match == "tenant"] if tenant_column else []
    if not keys and not tenants and policy.hold_column is None:
        return None
    partition = sql.Identifier(schema, table)
    tenant_held: sql.Composable = sql.SQL("FALSE")
    typed = _typed_values(conn, partition, tenant_column, tenants) if tenant_column else []
    if tenant_column and typed:
        tenant_held = query(
            "partition_held_tenant", partition=partition, tenant=sql.Identifier(tenant_column)
        )
    column_held: sql.Composable = sql.SQL("FALSE")
    if policy.hold_column is not None:  # the hold_column rule of hold_row_held.sql
        column_held = sql.SQL(
            "coalesce(to_jsonb(p.{}) NOT IN ('false'::jsonb, 'null'::jsonb), FALSE)"
        ).format(sql.Identifier(policy.hold_column))
    statement = query(
        "partition_held_rows",
        partition=partition,
        key=sql.Identifier(policy.key_column),
        tenant_held=tenant_held,
        column_held=column_held,
    )
    params = {"held_keys": keys, "held_tenants": typed, "tenant_column": tenant_column}
    try:
        with bounded(conn, policy.timeouts, reads=True):
            row = conn.execute(statement, params).fetchone()
    except psycopg.errors.QueryCanceled:
        return (
            "a legal hold may keep one of its rows, and whether one does could not be read "
            "within plan_statement_timeout_ms"
        )
    if row and row["held"]:
        return (
            "it holds a row a legal hold keeps (retention.holds or hold_column): it is never "
            "dropped or detached; its other rows are deleted row by row"
        )
    return None


def _typed_values(
    conn: Connection, table: sql.Identifier, column: str, values: list[str]
) -> list[str]:
    """The hold values ``column``'s type accepts (an every-policy hold's tenant may be
    any text; one the type refuses matches none of its rows, as the deletes compare)."""
    statement = query("hold_typed_value", table=table, column=sql.Identifier(column))
    accepted: list[str] = []
    for value in values:
        try:
            with conn.transaction():
                conn.execute(statement, {"column": column, "value": value})
        except psycopg.errors.DataError:
            continue
        accepted.append(value)
    return accepted


NOT_OURS = "a detach pending that retention did not start"


def began_here(conn: Connection, policy: Policy, partition: ExpiredPartition) -> bool:
    """Whether this policy recorded a detach of this very table (by oid): only then is a
    pending detach finished without the checks of rules 2 and 3."""
    row = conn.execute(
        query("partition_drop_by_oid"), {"policy": policy.name, "oid": partition.table_oid}
    ).fetchone()
    return bool(row and row["ours"])


def _hours(gap: dt.timedelta) -> str:
    return f"{gap.total_seconds() / 3600:g} h"


# -- the evidence -------------------------------------------------------------------


def _record_key(policy: Policy, run_id: str, partition_name: str) -> dict[str, Any]:
    return {"policy": policy.name, "run_id": run_id, "partition_name": partition_name}


def _record(
    conn: Connection,
    key: dict[str, Any],
    partition: ExpiredPartition,
    action: str,
    state: str,
    reason: str | None = None,
) -> None:
    """Write what this run decided for a listed partition, before any DDL."""
    conn.execute(
        query("partition_drop_record"),
        {
            **key,
            "table_oid": partition.table_oid,
            "bounds": partition.bounds,
            "estimated_rows": partition.estimated_rows,
            "action": action,
            "state": state,
            "reason": reason,
        },
    )


def _move(
    conn: Connection,
    key: dict[str, Any],
    state: str,
    reason: str | None = None,
    resolved_by_run: str | None = None,
) -> None:
    conn.execute(
        query("partition_drop_state"),
        {**key, "state": state, "reason": reason, "resolved_by_run": resolved_by_run},
    )


def _error_text(failed: BaseException) -> str:
    """The error's class, message and detail on one line (its hint is left out: for a
    dependent object it says to drop with CASCADE, which is not ours to do)."""
    diag = getattr(failed, "diag", None)
    message = (diag.message_primary if diag else None) or str(failed).strip()
    detail = diag.message_detail if diag else None
    text = f"{type(failed).__name__}: {message}" + (f" ({detail})" if detail else "")
    return " ".join(text.split())[:MAX_ERROR]


# -- what a recorded table is now, and what to do about it (pure) ---------------------


@dataclass(frozen=True)
class TableNow:
    """What the catalog says now about a recorded partition (``partition_identity.sql``)."""

    recorded_oid: int | None  # None: recorded before migration 0012
    name_oid: int | None  # the table the recorded name resolves to (None: no such table)
    oid_exists: bool
    oid_name: str | None  # the recorded table's name now
    is_partition: bool
    parent_name: str | None
    attached_to_policy_table: bool
    detach_pending: bool = False  # an interrupted DETACH … CONCURRENTLY


Verdict = Literal["drop", "detached", "dropped", "not_detached", "abandoned"]


def finishing_verdict(
    name: str, action: str, state: str, now: TableNow
) -> tuple[Verdict, str | None]:
    """What the finishing pass does with an unfinished record, and why (pure).

    ``drop`` only when the name still resolves to the recorded oid and the table
    is not a partition of anything; a record whose partition is still attached to
    the policy's table never detached (``not_detached``: the listing takes it up
    again); a table that is gone was dropped (by someone else: the reason says
    so); everything else is ``abandoned``, nothing dropped.
    """
    if now.recorded_oid is None:
        if now.attached_to_policy_table and state == "started":
            return "not_detached", f"still a partition of {now.parent_name}"
        return "abandoned", (
            "no oid was recorded (the detach predates migration 0012), so whether "
            f"{name} is still the table that was detached cannot be proven; nothing was "
            "dropped: check it and drop it by hand"
        )
    if not now.oid_exists:
        taken = (
            f"; the name {name} now belongs to another table (oid {now.name_oid}), left alone"
            if now.name_oid is not None
            else ""
        )
        return "dropped", f"already gone: no table has oid {now.recorded_oid} any more{taken}"
    if now.is_partition:
        if now.attached_to_policy_table and state == "started":
            return "not_detached", (
                f"still a partition of {now.parent_name}: the detach did not take place "
                "(or is pending); the fast path or the windows take it up again"
            )
        again = " again" if now.attached_to_policy_table else ""
        return "abandoned", (
            f"the table detached (oid {now.recorded_oid}, now {now.oid_name}) is a "
            f"partition of {now.parent_name}{again}; nothing was dropped"
        )
    if now.name_oid == now.recorded_oid:
        return ("drop", None) if action == "drop" else ("detached", None)
    if action != "drop":  # kept by detach_only: renamed or not, it is detached
        return "detached", f"renamed to {now.oid_name}"
    if now.name_oid is None:
        return "abandoned", (
            f"the table detached (oid {now.recorded_oid}) was renamed to {now.oid_name} and "
            f"no table is called {name} any more; nothing was dropped: check "
            f"{now.oid_name} and drop it by hand if it is only old rows"
        )
    return "abandoned", (
        f"{name} now names a different table (oid {now.name_oid}, not the recorded "
        f"{now.recorded_oid}); the table detached is now {now.oid_name}. Nothing was "
        f"dropped: check {now.oid_name} and drop it by hand if it is only old rows"
    )


def table_now(
    conn: Connection, policy: Policy, partition_name: str, recorded_oid: int | None
) -> TableNow:
    """Gather :class:`TableNow` for a recorded partition (reads the catalog only).

    Without a recorded oid, the table the name resolves to stands in for it, so that
    a partition still attached is told apart."""
    schema, name = partition_name.split(".", 1)
    params = {
        "schema": schema,
        "name": name,
        "parent_schema": policy.table_spec.schema,
        "parent_table": policy.table_spec.name,
        "oid": recorded_oid,
    }
    row = conn.execute(query("partition_identity"), params).fetchone()
    assert row is not None
    return TableNow(
        recorded_oid=recorded_oid,
        name_oid=row["name_oid"],
        oid_exists=bool(row["oid_exists"]),
        oid_name=row["oid_name"],
        is_partition=bool(row["is_partition"]),
        parent_name=row["parent_name"],
        attached_to_policy_table=bool(row["attached_to_policy_table"]),
        detach_pending=bool(row["detach_pending"]),
    )


# -- detach and drop ----------------------------------------------------------------


@dataclass(frozen=True)
class PartitionResult:
    """What became of one expired partition in this run."""

    partition: ExpiredPartition
    state: Literal["dropped", "detached", "not_detached", "abandoned"]
    note: str | None = None  # the error, or why it was abandoned

    def as_dict(self) -> dict[str, Any]:
        return {**self.partition.as_dict(), **({"error": self.note} if self.note else {})}


class _KeptByHold(Exception):
    """A legal hold keeps a row of the detached table (found under the drop's locks)."""


class _Changed(Exception):
    """The table is no longer the one recorded (found under the drop's lock)."""

    def __init__(self, verdict: Verdict, reason: str | None) -> None:
        super().__init__(reason)
        self.verdict = verdict
        self.reason = reason


def drop_detached(
    conn: Connection,
    policy: Policy,
    key: dict[str, Any],
    recorded_oid: int,
    *,
    resolved_by_run: str | None = None,
) -> tuple[Literal["dropped", "detached", "abandoned", "not_detached"], str | None]:
    """Drop a detached table only if it is still the one recorded: in one transaction,
    lock it, check that its name resolves to ``recorded_oid`` and that it is not a
    partition, drop it and record ``dropped``. An error (a dependent object, a lock)
    is recorded on the record, which stays ``detached``; never raised, unless the
    connection is lost."""
    name = key["partition_name"]
    schema, table = name.split(".", 1)
    child = sql.Identifier(schema, table)
    lock_ms = policy.timeouts.lock_ms
    try:
        with conn.transaction():
            conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{lock_ms}ms",))
            conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(child))
            verdict, reason = finishing_verdict(
                name, "drop", "detached", table_now(conn, policy, name, recorded_oid)
            )
            if verdict != "drop":
                raise _Changed(verdict, reason)
            # The listing checked the holds; one placed since (before the detach, or after
            # an earlier attempt's) must still win. SHARE on the holds waits for a hold
            # being placed to commit and keeps new ones out until the drop commits, so the
            # check below and the drop see the same holds.
            conn.execute("LOCK TABLE retention.holds IN SHARE MODE")
            if _held_rows(conn, policy, schema, table) is not None:
                raise _KeptByHold()
            conn.execute(sql.SQL("DROP TABLE {}").format(child))
            _move(conn, key, "dropped", resolved_by_run=resolved_by_run)
    except _KeptByHold:
        error = (
            "not dropped: a legal hold placed since it was listed keeps one of its rows "
            "(retention.holds or hold_column), or whether one does could not be read in "
            "time. The table stays detached with all its rows; a later run drops it once "
            "no hold keeps any (or attach it again for the row path)"
        )
        conn.execute(query("partition_drop_error"), {**key, "error": error})
        log.warning("policy %s: %s %s", policy.name, name, error)
        return "detached", error
    except _Changed as changed:
        _move(conn, key, changed.verdict, changed.reason, resolved_by_run)
        log.warning("policy %s: %s not dropped: %s", policy.name, name, changed.reason)
        return changed.verdict, changed.reason  # type: ignore[return-value]
    except psycopg.Error as failed:
        if conn.broken:
            raise
        error = _error_text(failed)
        if isinstance(failed, psycopg.errors.LockNotAvailable):
            holders = table_lock_holders(conn, [(schema, table)], ALL_MODES)
            error = f"not dropped within lock_timeout ({lock_ms} ms) ({holders})"
        conn.execute(query("partition_drop_error"), {**key, "error": error})
        log.warning(
            "policy %s: %s is detached but could not be dropped: %s. It holds only rows "
            "older than the cutoff; the run goes on, reconcile names it, and the next run "
            "tries again (or drop it by hand once the cause is gone).",
            policy.name,
            name,
            error,
        )
        return "detached", error
    log.info("policy %s: dropped %s", policy.name, name)
    return "dropped", None


def drop_partition(
    conn: Connection,
    policy: Policy,
    run_id: str,
    partition: ExpiredPartition,
    *,
    concurrently: bool,
    keep: bool,
) -> PartitionResult:
    """Detach one expired partition (and drop it unless ``keep``), recording each step.

    Raises :class:`PartitionDropError` only when a lock on the table stopped the
    detach (nothing detached; a retry tries again); any other failure is recorded
    and returned, so that the run goes on to its windows."""
    parent = sql.Identifier(policy.table_spec.schema, policy.table_spec.name)
    child = sql.Identifier(partition.schema, partition.name)
    key = _record_key(policy, run_id, partition.qualified)
    _record(conn, key, partition, "detach" if keep else "drop", "started")
    lock_ms = policy.timeouts.lock_ms
    try:
        if concurrently and not partition.detach_pending:
            _outside_transaction(
                conn,
                sql.SQL("ALTER TABLE {} DETACH PARTITION {} CONCURRENTLY").format(parent, child),
                lock_ms,
            )
        else:  # the record moves on in the detach's own transaction: never stranded
            how = "FINALIZE" if partition.detach_pending else ""  # finish an interrupted one
            with conn.transaction():
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{lock_ms}ms",))
                conn.execute(
                    sql.SQL("ALTER TABLE {} DETACH PARTITION {} {}").format(
                        parent, child, sql.SQL(how)
                    )
                )
                _move(conn, key, "detached")
    except psycopg.Error as failed:
        if conn.broken:
            raise
        now = table_now(conn, policy, partition.qualified, partition.table_oid)
        if not (now.is_partition and now.attached_to_policy_table):
            log.warning(
                "policy %s: detaching %s reported %s, yet it is detached; going on",
                policy.name,
                partition.qualified,
                _error_text(failed),
            )
        else:
            error = _error_text(failed)
            if isinstance(failed, psycopg.errors.LockNotAvailable):
                # CONCURRENTLY's second phase waits for every older transaction on the
                # table and, when it gives up, leaves the detach pending
                pending = now.detach_pending and not partition.detach_pending
                conflicting = (
                    SHARE_UPDATE_EXCLUSIVE_CONFLICTS
                    if (concurrently or partition.detach_pending) and not pending
                    else ALL_MODES
                )
                holders = table_lock_holders(
                    conn, _parent_and_child(policy, partition), conflicting
                )
                left = (
                    "The detach is pending (its first step committed); a retry finishes "
                    "it (FINALIZE)."
                    if pending
                    else "Nothing was detached; a retry tries again."
                )
                message = (
                    f"policy {policy.name!r}: could not detach {partition.qualified} within "
                    f"lock_timeout ({lock_ms} ms): another session holds a lock on "
                    f"{policy.table} ({holders}). {left}"
                )
                _move(conn, key, "not_detached", message)
                raise PartitionDropError(message) from failed
            _move(conn, key, "not_detached", error)
            log.warning(
                "policy %s: %s was not detached (%s); it stays attached and the windows "
                "delete its rows",
                policy.name,
                partition.qualified,
                error,
            )
            return PartitionResult(partition, "not_detached", error)
    if concurrently and not partition.detach_pending:  # it ran outside a transaction
        _move(conn, key, "detached")
    log.info(
        "policy %s: detached %s, %s rows (%s)",
        policy.name,
        partition.qualified,
        _rows_text(partition.estimated_rows),
        partition.bounds,
    )
    if keep:
        return PartitionResult(partition, "detached")
    state, note = drop_detached(conn, policy, key, partition.table_oid)
    return PartitionResult(partition, state, note)  # type: ignore[arg-type]


def _rows_text(rows: int | None) -> str:
    return UNKNOWN if rows is None else f"~{rows:,}"


def _parent_and_child(policy: Policy, partition: ExpiredPartition) -> list[tuple[str, str]]:
    return [
        (policy.table_spec.schema, policy.table_spec.name),
        (partition.schema, partition.name),
    ]


def _outside_transaction(conn: Connection, statement: sql.Composable, lock_ms: int) -> None:
    """Run DDL that refuses a transaction block, with the session's lock_timeout set for it."""
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{lock_ms}ms",))
    try:
        conn.execute(statement)
    finally:
        if not conn.broken:
            conn.execute("RESET lock_timeout")


def finish_pending_detaches(conn: Connection, policy: Policy, run_id: str) -> list[dict[str, Any]]:
    """Finish (``FINALIZE``) the detaches this policy began that are still pending on its
    table (``partition_drop_pending_detach.sql``: a ``CONCURRENTLY`` whose second step
    gave up at ``lock_timeout`` or was interrupted), then drop the table unless it was
    detached to be kept. Only a detach with a record of this policy for the same table
    oid is finished: it was checked when it began; anyone else's is left pending (and
    reconcile names it). An error is logged and leaves the detach pending; never raised,
    unless the connection is lost."""
    table = policy.table_spec
    parent = sql.Identifier(table.schema, table.name)
    lock_ms = policy.timeouts.lock_ms
    rows = conn.execute(
        query("partition_drop_pending_detach"),
        {"policy": policy.name, "schema": table.schema, "table": table.name},
    ).fetchall()
    finished: list[dict[str, Any]] = []
    for row in rows:
        name, oid = row["partition_name"], int(row["table_oid"])
        key = _record_key(policy, row["run_id"], name)
        child = sql.Identifier(row["schema_now"], row["name_now"])
        outcome: dict[str, Any] = {"partition": name, "run_id": row["run_id"]}
        try:
            with conn.transaction():
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{lock_ms}ms",))
                conn.execute(
                    sql.SQL("ALTER TABLE {} DETACH PARTITION {} FINALIZE").format(parent, child)
                )
                _move(conn, key, "detached", resolved_by_run=run_id)
        except psycopg.Error as failed:
            if conn.broken:
                raise
            error = _error_text(failed)
            log.warning(
                "policy %s: the pending detach of %s (run %s) could not be finished: %s. "
                "Its rows are outside %s until it is; the next run tries again",
                policy.name,
                name,
                row["run_id"],
                error,
                policy.table,
            )
            finished.append({**outcome, "state": "detach_pending", "error": error})
            continue
        log.info("policy %s: finished the pending detach of %s", policy.name, name)
        if row["action"] != "drop":
            finished.append({**outcome, "state": "detached"})
            continue
        state, note = drop_detached(conn, policy, key, oid, resolved_by_run=run_id)
        if note:
            outcome["error" if state == "detached" else "reason"] = note
        finished.append({**outcome, "state": state})
    return finished


def finish_interrupted_drops(conn: Connection, policy: Policy, run_id: str) -> list[dict[str, Any]]:
    """Finish what earlier attempts left: first the detaches this policy began that are
    still pending (:func:`finish_pending_detaches`), then ``started`` records whose table
    is detached after all (the task died between the DDL and the record), and
    ``detached`` drops that failed. Each record gets :func:`finishing_verdict`; a drop
    error is recorded per table and never stops the pass or the run."""
    finished = finish_pending_detaches(conn, policy, run_id)
    handled = {(f["run_id"], f["partition"]) for f in finished}
    rows = conn.execute(query("partition_drop_unfinished"), {"policy": policy.name}).fetchall()
    for row in rows:
        name = row["partition_name"]
        if (row["run_id"], name) in handled:  # its drop was just tried
            continue
        key = _record_key(policy, row["run_id"], name)
        oid = None if row["table_oid"] is None else int(row["table_oid"])
        verdict, reason = finishing_verdict(
            name, row["action"], row["state"], table_now(conn, policy, name, oid)
        )
        if verdict == "drop":
            assert oid is not None
            if row["state"] == "started":
                _move(conn, key, "detached")  # it is: the record had not caught up
            verdict, reason = drop_detached(conn, policy, key, oid, resolved_by_run=run_id)
        else:
            _move(conn, key, verdict, reason, run_id)
        outcome = {"partition": name, "run_id": row["run_id"], "state": verdict}
        if reason:  # a drop still 'detached' afterwards failed: its reason is the error
            failed = verdict == "detached" and row["action"] == "drop"
            outcome["error" if failed else "reason"] = reason
        finished.append(outcome)
        log_as = log.warning if verdict in ("abandoned", "detached") else log.info
        log_as(
            "policy %s: %s, left by run %s (%s): now %s%s",
            policy.name,
            name,
            row["run_id"],
            row["state"],
            verdict,
            f": {reason}" if reason else "",
        )
    return finished


def drop_expired_partitions(
    conn: Connection,
    policy: Policy,
    run_id: str,
    cutoff: dt.datetime,
    *,
    column_type: str,
    dry_run: bool,
) -> dict[str, Any]:
    """The fast path for one run: what went (or, in a dry run, would go), what was left
    to the row path and why, or why nothing could go."""
    if policy.remote is not None:
        return {"skipped": "remote policy: every row's object needs its own call"}
    # before anything that may return early: a pending detach hides its rows from
    # the table, and a detached table holds rows outside it, whatever the policy
    # or the cutoff says now
    finished = [] if dry_run else finish_interrupted_drops(conn, policy, run_id)
    since = {"finished_from_earlier_attempts": finished} if finished else {}
    if policy.partitions == "rows":
        return {"skipped": "partitions: rows (every row goes through the windows)", **since}
    if policy.children:
        return {
            "skipped": "children: listed (their rows go with their parents batch by batch; "
            "a dropped partition would leave a child without a constraint orphaned)",
            **since,
        }
    layout = partition_layout(conn, policy)
    if not layout.applies:
        return {"skipped": layout.why_not, **since}
    gap = largest_offset_change(conn, policy, column_type)
    going: list[ExpiredPartition] = []
    left: list[dict[str, Any]] = []
    for partition in expired_partitions(conn, policy, cutoff, column_type, gap):
        # a detach this policy began and left pending was checked when it began: it can
        # only be finished; anyone else's is not ours to finish unchecked
        if partition.detach_pending:
            why = None if began_here(conn, policy, partition) else NOT_OURS
        else:
            why = why_left_to_rows(conn, policy, partition, cutoff, column_type, gap)
        if why is None:
            going.append(partition)
            continue
        left.append({**partition.as_dict(), "why": why})
        log.warning(
            "policy %s: %s is left to the row path: %s", policy.name, partition.qualified, why
        )
        if not dry_run:
            key = _record_key(policy, run_id, partition.qualified)
            _record(conn, key, partition, "rows", "left", why)
    if dry_run:
        return {
            "would_go": [p.as_dict() for p in going],
            **_row_totals(going),
            "left_to_rows": left,
        }
    keep = policy.partitions == "detach_only"
    results = [
        drop_partition(
            conn, policy, run_id, partition, concurrently=not layout.has_default, keep=keep
        )
        for partition in going
    ]
    done = [r.partition for r in results if r.state == ("detached" if keep else "dropped")]
    outcome: dict[str, Any] = {
        "detached" if keep else "dropped": [p.as_dict() for p in done],
        **_row_totals(done),
        "left_to_rows": left,
        "not_detached": [r.as_dict() for r in results if r.state == "not_detached"],
        "finished_from_earlier_attempts": finished,
        "concurrently": not layout.has_default,
    }
    if not keep:  # detached but not dropped: reconcile names them until they are
        outcome["not_dropped"] = [
            r.as_dict() for r in results if r.state in ("detached", "abandoned")
        ]
    return outcome


def _row_totals(partitions: list[ExpiredPartition]) -> dict[str, Any]:
    """The rows of the partitions that went: known figures summed, unknown ones counted."""
    known = sum(p.estimated_rows or 0 for p in partitions)
    unknown = sum(1 for p in partitions if p.estimated_rows is None)
    if not unknown:
        return {"estimated_rows": known}
    return {
        "estimated_rows": UNKNOWN,
        "estimated_rows_known": known,
        "partitions_with_unknown_rows": unknown,
    }
