"""The held-row predicate, composed for one table: what every delete statement embeds.

``include/sql/hold_row_held.sql`` is a fragment that is TRUE when the current row is
held (an active hold on its key, tenant or object id, of this policy or of every
policy; or its ``hold_column`` set). Delete statements add ``AND NOT {held}`` and bind
``%(hold_policy)s`` to the policy's name. It is read once per statement (hashed
subplans over the few active holds), so a hold placed mid-window applies from the
next statement.

Read per row, it costs a batch about a fifth of its rate even when no hold exists (each
row's key and tenant cast to text and looked up). So ``include/sql/hold_row_possible.sql``
(:func:`holds_possible`) asks once per batch whether any active hold could match a row of
the table at all (:func:`hold_matches`: the matches the predicate asks of it); the row
deleter leaves the predicate out of a batch for which none could and the policy has no
``hold_column`` (``retention.rows.deleter``).
"""

from __future__ import annotations

from psycopg import sql

from retention.db.sqlfiles import query

HOLD_POLICY_PARAM = "hold_policy"  # the bound parameter the fragment reads
HOLD_MATCHES_PARAM = "hold_matches"  # the matches hold_row_possible.sql looks for (text[])


def held_row(
    key: sql.Composable,
    *,
    table: sql.Identifier | None = None,
    tenant: sql.Identifier | None = None,
    object_id: sql.Identifier | None = None,
    hold_column: sql.Composable | None = None,
) -> sql.Composed:
    """TRUE when the row is held (never NULL).

    A column the table does not have (no tenant column, no object id, no
    ``hold_column``) is simply not asked. A tenant or object hold is read through the
    column's type of ``table`` (required with either), as an every-policy hold is stored
    as given: "042" keeps an integer column's tenant 42.
    """
    nothing = sql.SQL("NULL::text")
    return query(
        "hold_row_held",
        key=key,
        tenant_text=sql.SQL("{}::text").format(tenant) if tenant is not None else nothing,
        tenant_held_value=held_value(table, tenant),
        object_text=sql.SQL("{}::text").format(object_id) if object_id is not None else nothing,
        object_held_value=held_value(table, object_id),
        hold_value=hold_column if hold_column is not None else sql.SQL("NULL::boolean"),
    )


def held_value(table: sql.Identifier | None, column: sql.Identifier | None) -> sql.Composable:
    """A hold's value as ``column`` of ``table`` reads it (``retention.hold_value_as``)."""
    if column is None:
        return sql.SQL("h.value")  # compared with NULL: matches nothing
    if table is None:
        raise ValueError("a tenant or object hold is read through its table's column type")
    return sql.SQL("retention.hold_value_as(NULL::{}, {}, h.value)").format(
        table, sql.Literal(_column_name(column))
    )


def _column_name(column: sql.Identifier) -> str:
    """The name an unqualified identifier quotes (psycopg keeps it private): its quoted
    text unquoted, doubled quotes undone."""
    quoted = column.as_string(None)
    name = quoted[1:-1].replace('""', '"')
    if sql.Identifier(name).as_string(None) != quoted:  # a qualified "schema"."column"
        raise ValueError(f"not one unqualified column name: {quoted}")
    return name


def not_held(
    key: sql.Composable,
    *,
    table: sql.Identifier | None = None,
    tenant: sql.Identifier | None = None,
    object_id: sql.Identifier | None = None,
    hold_column: sql.Composable | None = None,
) -> sql.Composed:
    """TRUE when the row is not held: the condition a delete statement's WHERE adds."""
    held = held_row(key, table=table, tenant=tenant, object_id=object_id, hold_column=hold_column)
    return sql.SQL("NOT {}").format(held)


def hold_matches(*, tenant: bool, object_id: bool) -> list[str]:
    """The matches (``retention.holds.match``) :func:`held_row` asks of a table: a row key
    always, a tenant or an object id only when the statement gives it that column (a hold
    on anything else can keep none of its rows)."""
    return ["key"] + (["tenant"] if tenant else []) + (["object"] if object_id else [])


def holds_possible() -> sql.Composed:
    """TRUE when an active hold of the policy or of every policy has one of the matches
    bound as ``%(hold_matches)s`` (``include/sql/hold_row_possible.sql``); also binds
    ``hold_policy``."""
    return query("hold_row_possible")
