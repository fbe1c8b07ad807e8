"""Coupled tables: the child tables a policy lists, and the foreign keys it must account for.

A row of the policy's table rarely lives alone: renditions reference an asset, line
items an order. Deleting the parent alone fails on a foreign key, cascades an unbounded
delete through ``ON DELETE CASCADE``, or leaves orphans. So a policy lists its children
(``children:``, nested up to three levels), and they go in the same transaction as their
parents: a row batch deletes its rows and, level by level, the child rows referencing
them in one statement (:func:`family_delete`: the foreign keys are checked when it ends,
and a parent re-checked and kept keeps its children); a remote finish does the same in
its one statement (``ops_finish.sql``, :func:`finish_children`): the children of the rows
it deletes, driven by those rows. A child row goes exactly when its parent row goes.

Before a run deletes anything, :func:`check_coupled_tables` reads ``pg_constraint`` for
every foreign key referencing the policy's table, a listed child, or (transitively) a
table an unlisted ``ON DELETE CASCADE`` deletes from; each must be listed
in ``children:``, ``ON DELETE CASCADE`` / ``SET NULL``, or named in
``ignore_foreign_keys:``. Anything else fails the run (no retry can mend it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from retention.db.connection import PAGE_STATEMENT_MS, Connection, bounded, set_local
from retention.db.sqlfiles import query
from retention.db.table_check import TableMismatch
from retention.policy.model import Policy
from retention.rows.target import TargetTable, TenantScope

ON_DELETE = {
    "a": "NO ACTION",
    "r": "RESTRICT",
    "c": "CASCADE",
    "n": "SET NULL",
    "d": "SET DEFAULT",
}
LEFT_TO_THE_DATABASE = {"c", "n"}  # ON DELETE actions a run may leave to Postgres


class CoupledTableError(TableMismatch):
    """A foreign key the policy does not account for, or a listed child that does not fit:
    a configuration error like a misspelt column, so no retry (a :class:`TableMismatch`)."""


@dataclass(frozen=True)
class ForeignKey:
    """One foreign key constraint, as ``target_foreign_keys.sql`` reads it."""

    name: str
    table: str  # the referencing table, schema.table
    columns: tuple[str, ...]
    referenced_table: str
    referenced_columns: tuple[str, ...]
    on_delete: str  # confdeltype: a, r, c, n, d

    @property
    def action(self) -> str:
        return ON_DELETE.get(self.on_delete, self.on_delete)

    def described(self) -> str:
        return (
            f"foreign key {self.name!r} ({self.table}.{', '.join(self.columns)} → "
            f"{self.referenced_table}.{', '.join(self.referenced_columns)}, ON DELETE "
            f"{self.action})"
        )


@dataclass(frozen=True)
class ChildLink:
    """A listed child resolved against the catalog: which parent column it references."""

    table: str  # schema.table
    foreign_key: str
    parent_table: str
    parent_column: str
    depth: int  # 1: references the policy's table
    constraint: str | None  # None: no foreign key constraint, so reconcile counts orphans
    parent: ChildLink | None = None

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier(*self.table.split("."))


@dataclass(frozen=True)
class Coupling:
    """What the catalog says of a policy's coupled tables."""

    links: list[ChildLink] = field(default_factory=list)  # depth first, parents first
    problems: list[str] = field(default_factory=list)  # each fails the run
    unlisted_cascades: list[ForeignKey] = field(default_factory=list)  # warnings
    ignored_unknown: list[str] = field(default_factory=list)  # warnings: a typo, or dropped
    # a listed child left out of ``links`` → why: its own problem, or its parent's refusal
    refused: dict[str, str] = field(default_factory=dict)

    def deepest_first(self) -> list[ChildLink]:
        return sorted(self.links, key=lambda link: -link.depth)

    def warnings(self) -> list[str]:
        return [
            f"{fk.described()} is not listed in children: its rows are deleted by the "
            "database's cascade, unseen by the batch sizer and the counts; list it in "
            "children: to delete them in bounded batches"
            for fk in self.unlisted_cascades
        ] + [
            f"ignore_foreign_keys names {name!r}, but no foreign key of that name references "
            "the policy's table or a listed child (a typo, or a constraint since dropped)"
            for name in self.ignored_unknown
        ]


def foreign_keys(conn: Connection, tables: list[str]) -> list[ForeignKey]:
    """Every foreign key referencing one of ``tables`` (catalog read only)."""
    rows = conn.execute(query("target_foreign_keys"), {"tables": tables}).fetchall()
    return [
        ForeignKey(
            name=row["constraint_name"],
            table=row["referencing_table"],
            columns=tuple(row["referencing_columns"]),
            referenced_table=row["referenced_table"],
            referenced_columns=tuple(row["referenced_columns"]),
            on_delete=row["on_delete"],
        )
        for row in rows
    ]


def primary_key(conn: Connection, table: str) -> list[str]:
    schema, name = table.split(".")
    rows = conn.execute(query("target_primary_key"), {"schema": schema, "table": name})
    return [row["column_name"] for row in rows]


def is_unique_column(conn: Connection, table: str, column: str) -> bool:
    """Whether ``column`` alone is unique in ``table`` (its primary key, or a unique
    index of that column only): a ``references:`` column must be (catalog read only)."""
    schema, name = table.split(".")
    where = {"schema": schema, "table": name, "column": column}
    row = conn.execute(query("target_unique_column"), where).fetchone()
    return bool(row and row["is_unique"])


def _missing_columns(conn: Connection, table: str, columns: list[str]) -> list[str]:
    """What of ``table`` and its ``columns`` the catalog does not have (catalog reads)."""
    schema, name = table.split(".")
    where = {"schema": schema, "table": name}
    present = conn.execute(query("target_exists"), where).fetchone()
    if not (present and present["present"]):
        return [f"table {table} does not exist"]
    known = {row["column_name"] for row in conn.execute(query("target_columns"), where)}
    return [
        f"column {column!r} does not exist in {table} (its columns: {', '.join(sorted(known))})"
        for column in columns
        if column not in known
    ]


def _classify(
    conn: Connection,
    policy: Policy,
    found: list[ForeignKey],
    accounted: set[str],
    reached: set[str],
    problems: list[str],
) -> list[ForeignKey]:
    """Classify every foreign key not ``accounted`` for (listed or ignored): a cascade or
    SET NULL is left to the database (a cascade's referencing table is followed, its
    foreign keys appended to ``found``), anything else is a problem. Returns the
    unlisted cascades."""
    cascades: list[ForeignKey] = []
    # A cascade deletes rows of its table too, so the foreign keys referencing that table
    # are followed as well (transitively): one without a cascade would fail the delete.
    via: dict[str, str] = {}  # a table reached through a cascade: that cascade's name
    queue = list(found)
    while queue:
        fk = queue.pop(0)
        if fk.name in accounted:
            continue
        if fk.on_delete in LEFT_TO_THE_DATABASE:
            if fk.on_delete == "c":
                cascades.append(fk)
                if fk.table not in reached:
                    reached.add(fk.table)
                    via[fk.table] = fk.name
                    more = foreign_keys(conn, [fk.table])
                    found.extend(more)
                    queue.extend(more)
            continue
        through = (
            f", reached through the ON DELETE CASCADE of {via[fk.referenced_table]!r}"
            if fk.referenced_table in via
            else ""
        )
        problems.append(
            f"policy {policy.name!r}: {fk.described()} references rows this policy deletes"
            f"{through} (referencing table {fk.table}, column {', '.join(fk.columns)}) and is "
            f"not accounted for; deleting would fail on it. {_resolutions(policy, fk)}"
        )
    return cascades


def _resolutions(policy: Policy, fk: ForeignKey) -> str:
    """The ways to account for an unaccounted foreign key, worded for what it is: a
    composite key cannot be a listed child's (a child's ``foreign_key`` is one column),
    and a key referencing a listed child is listed under that child's ``children:``."""
    others = (
        "make the constraint ON DELETE CASCADE or SET NULL; or name "
        f"{fk.name!r} in ignore_foreign_keys: with a reason"
    )
    if len(fk.columns) > 1:
        return (
            f"It is a composite key ({', '.join(fk.columns)} → "
            f"{', '.join(fk.referenced_columns)}), which children: cannot list (a child's "
            "foreign_key is one column, referencing one unique column of its parent). "
            f"Resolve it one of two ways: {others}"
        )
    where = "children:"
    if fk.referenced_table != policy.table:
        where = f"the children: of the listed child {fk.referenced_table}"
    return (
        f"Resolve it one of three ways: list {fk.table} in {where} (foreign_key: "
        f"{fk.columns[0]}) so its rows go with their parents; {others}"
    )


def coupled_tables(conn: Connection, policy: Policy) -> Coupling:
    """Resolve the policy's children and classify every foreign key referencing its tables
    (never raises for a problem: :func:`check_coupled_tables` does)."""
    tables = [policy.table] + [child.table for _, child in policy.child_tables()]
    found = foreign_keys(conn, tables)
    ignored = {fk.constraint for fk in policy.ignore_foreign_keys}
    links: list[ChildLink] = []
    problems: list[str] = []
    used: set[str] = set()
    refused: dict[str, str] = {}

    def refuse(child: Any, *why: str) -> None:
        """``child`` is left out for ``why`` (each a problem), and its descendants with it."""
        problems.extend(why)
        refused[child.table] = "; ".join(why)
        for _, below in child.walk()[1:]:
            refused.setdefault(below.table, f"its parent {child.table} was refused")

    def resolve(children: Any, parent_table: str, parent: ChildLink | None, depth: int) -> None:
        for child in children:
            missing = _missing_columns(conn, child.table, [child.foreign_key])
            if child.references is not None:
                missing += _missing_columns(conn, parent_table, [child.references])
            if missing:
                refuse(
                    child,
                    *(
                        f"policy {policy.name!r}, field 'children' ({child.table}): {what}"
                        for what in missing
                    ),
                )
                continue
            constraint = next(
                (
                    fk
                    for fk in found
                    if fk.table == child.table
                    and fk.referenced_table == parent_table
                    and fk.columns == (child.foreign_key,)
                ),
                None,
            )
            column = child.references
            if (
                column is not None
                and constraint is not None
                and column != constraint.referenced_columns[0]
            ):
                used.add(constraint.name)  # listed, if wrongly: not "unaccounted" as well
                refuse(
                    child,
                    f"policy {policy.name!r}, field 'children': child {child.table} sets "
                    f"references: {column}, but its {constraint.described()} references "
                    f"{parent_table}.{constraint.referenced_columns[0]}: the constraint says "
                    f"which parent a row of {child.table} belongs to, and deleting by {column} "
                    "would take the children of other, living parents; drop references: (the "
                    f"constraint's column is used) or make it references: "
                    f"{constraint.referenced_columns[0]}",
                )
                continue
            if column is not None and not is_unique_column(conn, parent_table, column):
                refuse(
                    child,
                    f"policy {policy.name!r}, field 'children': child {child.table} sets "
                    f"references: {column}, but {parent_table}.{column} is not unique on its "
                    "own (no primary key or unique index of that column alone): a value "
                    "could name several parent rows (one per tenant, say), and the children "
                    "of every one would go with the first; reference a unique column, or "
                    "add a unique index on it",
                )
                continue
            if column is None and constraint is not None:
                column = constraint.referenced_columns[0]
            if column is None:
                keys = primary_key(conn, parent_table)
                column = keys[0] if len(keys) == 1 else None
            if column is None:
                refuse(
                    child,
                    f"policy {policy.name!r}, field 'children': child {child.table} "
                    f"({child.foreign_key}) has no foreign key constraint to {parent_table} "
                    "and that table has no single-column primary key; set references: to "
                    f"the column of {parent_table} that {child.foreign_key} holds",
                )
                continue
            if constraint is not None:
                used.add(constraint.name)
            link = ChildLink(
                table=child.table,
                foreign_key=child.foreign_key,
                parent_table=parent_table,
                parent_column=column,
                depth=depth,
                constraint=constraint.name if constraint else None,
                parent=parent,
            )
            links.append(link)
            resolve(child.children, child.table, link, depth + 1)

    resolve(policy.children, policy.table, None, 1)
    cascades = _classify(conn, policy, found, used | ignored, set(tables), problems)
    unknown = sorted(ignored - {fk.name for fk in found})
    return Coupling(
        links=links,
        problems=problems,
        unlisted_cascades=cascades,
        ignored_unknown=unknown,
        refused=refused,
    )


def check_coupled_tables(conn: Connection, policy: Policy) -> Coupling:
    """The policy's coupled tables, or :class:`CoupledTableError` naming every problem."""
    coupling = coupled_tables(conn, policy)
    if coupling.problems:
        raise CoupledTableError("\n".join(coupling.problems))
    return coupling


@dataclass(frozen=True)
class FinishChildren:
    """The parts of ``ops_finish.sql`` that delete a policy's listed children with the rows
    its ``gone`` deletes, in the same statement (see :func:`finish_children`)."""

    gone_columns: sql.Composable  # more of gone's RETURNING: the columns children reference
    children: sql.Composable  # the child levels' data-modifying CTEs
    tables: list[tuple[str, str]]  # (table, its CTE), parents first

    def counts(self, row_key: sql.Composable) -> sql.Composable:
        """A JSON object: the rows each child table lost for the policy's row ``row_key``
        (every listed table, 0 included), or an empty object without children."""
        if not self.tables:
            return sql.SQL("'{}'::jsonb")
        pairs = sql.SQL(", ").join(
            sql.SQL("{}::text, (SELECT count(*) FROM {} WHERE {}.gone_root_key = {})").format(
                sql.Literal(table), sql.Identifier(cte), sql.Identifier(cte), row_key
            )
            for table, cte in self.tables
        )
        return sql.SQL("jsonb_build_object({})").format(pairs)


def finish_children(links: list[ChildLink]) -> FinishChildren:
    """The child levels of a remote finish (``ops_finish_child.sql``), each driven by what
    the level above deleted (the policy's rows: ``gone``), so children go exactly with
    their row, in the statement that decides whether the row goes."""

    def returning(parent: ChildLink | None, alias: str) -> list[sql.Composable]:
        columns = sorted({link.parent_column for link in links if link.parent is parent})
        return [sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(c)) for c in columns]

    names = {id(link): f"child_{number}" for number, link in enumerate(links, start=1)}
    levels = []
    for link in sorted(links, key=lambda one: one.depth):  # a CTE after its parent's
        own = returning(link, "child_row")
        levels.append(
            query(
                "ops_finish_child",
                cte=sql.Identifier(names[id(link)]),
                child=link.identifier,
                foreign_key=sql.Identifier(link.foreign_key),
                parent=sql.Identifier(names[id(link.parent)] if link.parent else "gone"),
                column=sql.Identifier(link.parent_column),
                returning=sql.SQL("").join(sql.SQL("{}, ").format(c) for c in own),
                root=sql.Identifier("gone_root_key" if link.parent else "gone_row_key"),
            )
        )
    top = sorted({link.parent_column for link in links if link.parent is None})
    return FinishChildren(
        gone_columns=sql.SQL("").join(sql.SQL(", {}").format(sql.Identifier(c)) for c in top),
        children=sql.Composed(levels),
        tables=[(link.table, names[id(link)]) for link in links],
    )


def family_delete(
    links: list[ChildLink],
    target: TargetTable,
    scope: TenantScope,
    table: str,
    *,
    holds_possible: bool = True,
) -> tuple[sql.Composed, list[str]]:
    """One statement deleting a batch's rows of the policy's table and, level by level,
    the rows of every listed child that reference them (``target_delete_family.sql``);
    with the table each of its result columns counts, the policy's first.
    ``holds_possible=False``: without the held-row predicate (see :meth:`TargetTable.query`)."""

    def returning(parent: ChildLink | None, own_key: sql.Identifier) -> sql.Composable:
        columns = sorted({link.parent_column for link in links if link.parent is parent})
        if not columns:
            return own_key if parent is None else sql.SQL("1")
        return sql.SQL(", ").join(sql.Identifier(column) for column in columns)

    names = {id(link): f"child_{number}" for number, link in enumerate(links, start=1)}
    levels = [
        query(
            "target_delete_family_child",
            cte=sql.Identifier(names[id(link)]),
            child=link.identifier,
            foreign_key=sql.Identifier(link.foreign_key),
            column=sql.Identifier(link.parent_column),
            parent=sql.Identifier(names[id(link.parent)] if link.parent else "gone"),
            returning=returning(link, target.key),
        )
        for link in sorted(links, key=lambda one: one.depth)  # a CTE after its parent's
    ]
    ctes = ["gone", *(names[id(link)] for link in links)]
    counts = sql.SQL(", ").join(
        sql.SQL("(SELECT count(*) FROM {}) AS {}").format(
            sql.Identifier(cte), sql.Identifier(f"rows_{number}")
        )
        for number, cte in enumerate(ctes)
    )
    statement = target.query(
        "target_delete_family",
        scope,
        holds_possible=holds_possible,
        returning=returning(None, target.key),
        children=sql.Composed(levels),
        counts=counts,
    )
    return statement, [table, *(link.table for link in links)]


def count_orphans(
    conn: Connection, policy: Policy, not_counted: list[str] | None = None
) -> dict[str, int]:
    """Orphans of each listed child without a foreign key constraint: child rows whose
    parent key no longer exists (read-only; a constraint makes orphans impossible).

    Each count is a full anti-join, bounded by the caller's timeouts: with
    ``not_counted`` given, a table whose count timed out (or waited on a lock past
    ``lock_timeout``) is appended to it and the others are still counted; without it,
    the timeout raises."""
    orphans: dict[str, int] = {}
    for link in coupled_tables(conn, policy).links:
        if link.constraint is not None:
            continue
        statement = query(
            "target_orphans",
            child=link.identifier,
            foreign_key=sql.Identifier(link.foreign_key),
            parent=sql.Identifier(*link.parent_table.split(".")),
            column=sql.Identifier(link.parent_column),
        )
        try:
            with conn.transaction():  # a savepoint: a timeout spoils only this count
                row = conn.execute(statement).fetchone()
        except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable):
            if not_counted is None:
                raise
            not_counted.append(link.table)
            continue
        count = int(row["orphans"]) if row else 0
        if count:
            orphans[link.table] = count
    return orphans


ROWS_COUNTED = 1000  # per table, by rows_of_key: a larger family shows as "1000+"


@dataclass(frozen=True)
class TableRows:
    """The rows of one table of a policy's family still there for one row key."""

    table: str  # schema.table
    rows: int | None  # at most ROWS_COUNTED; None: not counted (``not_counted`` says why)
    more: bool = False  # at least ``rows``: this table or a level above it had more
    not_counted: str | None = None  # "timed out", or why the child was left out

    def as_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows": self.rows,
            "more": self.more,
            "not_counted": self.not_counted,
        }

    def shown(self) -> str:
        """``12``, ``1000+``, or ``not counted (timed out)`` (or the reason it was not)."""
        if self.rows is None:
            return f"not counted ({self.not_counted or 'timed out'})"
        return f"{self.rows}{'+' if self.more else ''}"


TIMED_OUT = "timed out"


def rows_of_key(
    conn: Connection,
    policy: Policy,
    row_key: int,
    limit: int = ROWS_COUNTED,
    *,
    within_ms: int = PAGE_STATEMENT_MS,
) -> list[TableRows]:
    """The rows still there for ``row_key``: the policy's row, then each listed child's
    rows that descend from it (parents first), each counted up to ``limit`` (a level
    past it makes the levels below "at least"), level by level through each foreign key
    (``explain_family_level.sql``), in one read-only transaction. A person waits for the
    answer (the view, the API, the CLI), so the whole lookup has one deadline,
    ``within_ms`` from now, and each count may run the policy's ``statement_ms`` and wait
    its ``lock_ms`` only as far as that deadline: a count that runs out of time is
    ``None`` ("timed out") and the others are still counted, until the deadline has
    passed. A listed child the catalog check refused (``coupled_tables``'s ``refused``:
    a missing column, a wrong ``references:``…) is not counted, with the reason."""
    deadline = time.monotonic() + within_ms / 1000
    spec = policy.table_spec
    table = sql.Identifier(spec.schema, spec.name)
    key = sql.Identifier(policy.key_column)

    def rows_of(link: ChildLink | None, column: sql.Composable) -> sql.Composable:
        if link is None:
            return query(
                "explain_family_level",
                column=column,
                table=table,
                match=key,
                above=sql.SQL("%(row_key)s"),
            )
        return query(
            "explain_family_level",
            column=column,
            table=link.identifier,
            match=sql.Identifier(link.foreign_key),
            above=rows_of(link.parent, sql.Identifier(link.parent_column)),
        )

    def above_tables(link: ChildLink | None) -> list[str]:
        """The tables above ``link``'s: its parents' up to the policy's."""
        if link is None:
            return []
        return [link.parent.table if link.parent else policy.table, *above_tables(link.parent)]

    def left_ms() -> int:
        return int((deadline - time.monotonic()) * 1000)

    timeouts = policy.timeouts
    capped = replace(
        timeouts,
        statement_ms=min(timeouts.statement_ms, within_ms),
        lock_ms=min(timeouts.lock_ms, within_ms),
    )
    counted: dict[str, TableRows] = {}
    past: set[str] = set()  # the tables whose level ran past ``limit``
    outermost = conn.info.transaction_status == TransactionStatus.IDLE
    with bounded(conn, capped):
        if outermost:  # inside a caller's transaction it would stay read-only after us
            conn.execute("SET TRANSACTION READ ONLY")
        coupling = coupled_tables(conn, policy)
        for link in [None, *coupling.links]:
            name = link.table if link else policy.table
            budget = left_ms()
            if budget <= 0:
                counted[name] = TableRows(name, None, not_counted=TIMED_OUT)
                continue
            statement = query("explain_family_rows", rows=rows_of(link, sql.SQL("1")))
            try:
                with conn.transaction():  # a savepoint: a timeout spoils only this count
                    set_local(
                        conn,
                        statement_ms=min(capped.statement_ms, budget),
                        lock_ms=min(capped.lock_ms, budget),
                    )
                    row = conn.execute(statement, {"row_key": row_key, "cap": limit + 1})
                    found = int(row.fetchone()["row_count"])  # type: ignore[index]
            except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable):
                counted[name] = TableRows(name, None, not_counted=TIMED_OUT)
                continue
            if found > limit:
                past.add(name)
            counted[name] = TableRows(
                name, min(found, limit), more=bool({name, *above_tables(link)} & past)
            )
    for name, why in coupling.refused.items():
        counted.setdefault(name, TableRows(name, None, not_counted=why))
    order = [policy.table] + [child.table for _, child in policy.child_tables()]
    return sorted(counted.values(), key=lambda one: order.index(one.table))
