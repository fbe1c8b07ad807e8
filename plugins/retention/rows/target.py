"""The table a policy cleans, as SQL identifiers, and the tenant scopes of windows.

A window covers one tenant (``one``), the rows whose tenant is NULL (``null``),
or every tenant (``all``: policies without ``tenant_column``, or too many
tenants to give each its own window).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from psycopg import sql

from retention.db.sqlfiles import query
from retention.holds.predicate import held_row, held_value, hold_matches
from retention.policy.model import RemoteSpec, TableSpec

TenantScope = Literal["all", "one", "null"]


@dataclass(frozen=True)
class TargetTable:
    """Identifiers of a policy's table, ready to compose into the SQL files."""

    table: sql.Identifier
    key: sql.Identifier
    ts: sql.Identifier
    tenant: sql.Identifier | None
    object_id: sql.Identifier | None = None
    version: sql.Identifier | None = None
    hold_column: sql.Identifier | None = None

    @classmethod
    def of(cls, table: TableSpec, remote: RemoteSpec | None = None) -> TargetTable:
        return cls(
            table=sql.Identifier(table.schema, table.name),
            key=sql.Identifier(table.key_column),
            ts=sql.Identifier(table.timestamp_column),
            tenant=sql.Identifier(table.tenant_column) if table.tenant_column else None,
            object_id=sql.Identifier(remote.object_id_column) if remote else None,
            version=sql.Identifier(remote.version_column)
            if remote and remote.version_column
            else None,
            hold_column=sql.Identifier(table.hold_column) if table.hold_column else None,
        )

    def operation_key_expr(self) -> sql.Composable:
        """sha256(policy|revision|table|row key|version): see ``objects.keys.operation_key``.

        Expects the parameters ``policy``, ``revision`` and ``table_name``.
        """
        return sql.SQL(
            "encode(sha256(convert_to(concat_ws('|', %(policy)s::text, %(revision)s::text, "
            "%(table_name)s::text, {}::text, {}), 'UTF8')), 'hex')"
        ).format(self.key, self.version_expr())

    def version_expr(self) -> sql.Composable:
        """A row's version as text: the version column, else the timestamp in microseconds."""
        if self.version is not None:
            return sql.SQL("coalesce({}::text, '')").format(self.version)
        return sql.SQL("(extract(epoch FROM {}) * 1000000)::bigint::text").format(self.ts)

    def tenant_filter(self, scope: TenantScope) -> sql.Composable:
        if scope == "all" or self.tenant is None:
            return sql.SQL("TRUE")
        if scope == "null":
            return sql.SQL("{} IS NULL").format(self.tenant)
        return sql.SQL("{} = %(tenant)s").format(self.tenant)

    def held(self) -> sql.Composed:
        """TRUE when a row is held (``include/sql/hold_row_held.sql``); binds ``hold_policy``."""
        return held_row(
            self.key,
            table=self.table,
            tenant=self.tenant,
            object_id=self.object_id,
            hold_column=self.hold_column,
        )

    def hold_matches(self) -> list[str]:
        """The matches of a hold :meth:`held` can keep a row of this table by."""
        return hold_matches(tenant=self.tenant is not None, object_id=self.object_id is not None)

    def query(
        self,
        name: str,
        scope: TenantScope = "all",
        *,
        holds_possible: bool = True,
        **more: sql.Composable,
    ) -> sql.Composed:
        """A SQL file with this table's identifiers, the scope's tenant filter,
        ``{held}``, the held-row predicate (a statement using it binds ``hold_policy``),
        and ``more`` parts a statement needs besides (a child's column, another file's
        text, an erasure's scope filter).

        ``holds_possible=False`` makes ``{held}`` a plain ``FALSE`` (which Postgres folds
        away): only for a statement run when no hold can keep any row of the table, as
        the caller has just read in the same transaction (``retention.rows.deleter``)."""
        parts: dict[str, sql.Composable] = {
            **more,
            "table": self.table,
            "key": self.key,
            "ts": self.ts,
            "tenant_filter": self.tenant_filter(scope),
            "held": self.held() if holds_possible else sql.SQL("FALSE"),
        }
        if self.tenant is not None:
            parts["tenant"] = self.tenant
        parts["tenant_text"] = (
            sql.SQL("{}::text").format(self.tenant) if self.tenant else sql.SQL("NULL::text")
        )
        # an active hold's value (``h.value``) as this table's column reads it
        parts["tenant_held_value"] = held_value(self.table, self.tenant)
        parts["object_held_value"] = held_value(self.table, self.object_id)
        if self.object_id is not None:
            parts["object_id"] = self.object_id
            parts["version_expr"] = self.version_expr()
            parts["operation_key_expr"] = self.operation_key_expr()
        return query(name, **parts)
