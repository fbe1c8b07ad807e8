"""Does the live table fit the policy? The table, and every column the policy names.

A misspelt column is a configuration error: no retry can mend it, and it should be found
before a run touches anything, not by whichever task first reads that column. So the
first task of every run that opens the policy's database (``migrate_schema``) checks the
table and each column-naming field (:data:`retention.policy.model.COLUMN_FIELDS`), and
fails without a retry naming the policy, the field, the column, a close match and the
columns that do exist. The planner and the partition step check again (they need the
column types), and the Retention view shows the same check for every policy.

Two catalog reads (``target_exists.sql``, ``target_columns.sql``); nothing of the table
itself is read or locked.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.policy.model import Policy

INTEGER_TYPES = {"smallint", "integer", "bigint"}
TIMESTAMP_TYPES = {"timestamp with time zone", "timestamp without time zone", "date"}


class TableMismatch(RuntimeError):
    """The policy's table, or a column it names, does not exist or has the wrong type."""


@dataclass(frozen=True)
class TableFit:
    """What the catalog says of a policy's table, and what does not fit the policy."""

    table: str
    exists: bool
    columns: dict[str, str] = field(default_factory=dict)  # name → type, in table order
    problems: list[str] = field(default_factory=list)  # each: policy 'x', field 'y': …

    @property
    def fits(self) -> bool:
        return not self.problems


def table_fit(conn: Connection, policy: Policy) -> TableFit:
    """Look the policy's table and named columns up in the catalog (never raises for a
    mismatch: the Retention view lists them; :func:`check_table` raises)."""
    spec = policy.table_spec
    where = {"schema": spec.schema, "table": spec.name}
    present = conn.execute(query("target_exists"), where).fetchone()
    if not (present and present["present"]):
        return TableFit(
            str(spec),
            exists=False,
            problems=[
                f"policy {policy.name!r}, field 'table': table {spec} does not exist "
                "in the database of the policy's postgres_conn_id"
            ],
        )
    rows = conn.execute(query("target_columns"), where)
    columns = {row["column_name"]: row["column_type"] for row in rows}
    return TableFit(
        str(spec), exists=True, columns=columns, problems=column_problems(policy, columns)
    )


def check_table(conn: Connection, policy: Policy) -> dict[str, str]:
    """The table's columns and their types, or :class:`TableMismatch` naming every problem."""
    fit = table_fit(conn, policy)
    if not fit.fits:
        raise TableMismatch("\n".join(fit.problems))
    return fit.columns


def column_problems(policy: Policy, columns: dict[str, str]) -> list[str]:
    """What does not fit between the policy's named columns and the table's ``columns``
    (name → type): a column that is missing, a key that is not an integer, a timestamp
    column that is not a timestamp or date (pure)."""
    table = policy.table
    problems = []
    for path, column in policy.named_columns().items():
        if column not in columns:
            close = difflib.get_close_matches(column, list(columns), n=1)
            problems.append(
                f"policy {policy.name!r}, field {path!r}: column {column!r} does not exist "
                f"in {table} (its columns: {', '.join(columns) or 'none'})"
                + (f"; did you mean {close[0]!r}?" if close else "")
            )
    key_type = columns.get(policy.key_column)
    if key_type is not None and key_type not in INTEGER_TYPES:
        problems.append(
            f"policy {policy.name!r}, field 'key_column': {policy.key_column!r} is "
            f"{key_type}; windows need an integer key"
        )
    ts_type = columns.get(policy.timestamp_column)
    if ts_type is not None and ts_type not in TIMESTAMP_TYPES:
        problems.append(
            f"policy {policy.name!r}, field 'timestamp_column': {policy.timestamp_column!r} "
            f"is {ts_type}; expected a timestamp"
        )
    return problems
