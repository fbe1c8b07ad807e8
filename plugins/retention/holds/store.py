"""Place, lift, list and look up legal holds (``retention.holds``).

Every change is one short transaction that records who made it and why; nothing
here deletes or changes a row of a policy's table. Lifting a hold makes the
operations it kept ``pending`` again in the same transaction (those no other
active hold keeps); the screen re-checks each one just before its call.

This is the interface the erasure and the evidence use: :func:`matching_holds`
answers "which active holds keep this tenant, key or object of this policy?".
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import psycopg
from psycopg import sql

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.policy.model import Policy

LIST_LIMIT = 1000


class HoldMatch(StrEnum):
    """What a hold matches (a member is its string, as the SQL expects)."""

    TENANT = "tenant"
    KEY = "key"
    OBJECT = "object"


class HoldError(ValueError):
    """A hold cannot be placed or lifted as asked; nothing was written."""


@dataclass(frozen=True)
class Hold:
    """One hold as recorded; ``policy`` None means every policy."""

    hold_id: int
    policy: str | None
    match: HoldMatch
    value: str
    reason: str
    placed_by: str
    placed_at: dt.datetime
    lifted_by: str | None = None
    lifted_at: dt.datetime | None = None
    lift_reason: str | None = None

    @property
    def active(self) -> bool:
        return self.lifted_at is None

    @property
    def described(self) -> str:
        """``hold 7 (tenant 42, every policy: case 991)``: how logs and reasons name it."""
        scope = f"policy {self.policy}" if self.policy else "every policy"
        return f"hold {self.hold_id} ({self.match} {self.value}, {scope}: {self.reason})"

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Hold:
        return cls(**{**row, "match": HoldMatch(row["match"])})

    def as_json(self) -> dict[str, Any]:
        """The JSON form of the CLI, the API and the view (``id``, ``policy``, ``match``, …)."""
        out = asdict(self)
        out["id"] = out.pop("hold_id")
        out["match"] = str(self.match)
        for name in ("placed_at", "lifted_at"):
            value = out[name]
            out[name] = value.isoformat() if value is not None else None
        return out


def _reason(reason: str | None, what: str) -> str:
    text = (reason or "").strip()
    if not text:
        raise HoldError(f'{what} needs a reason (--reason "…"): say who asked and why')
    return text


def normalised_value(match: HoldMatch | str, value: object) -> str:
    """The value as the holds table compares it: a row key as its integer's text."""
    match = HoldMatch(match)
    text = str(value if value is not None else "").strip()
    if not text:
        raise HoldError(f"a {match} hold needs a value")
    if match is HoldMatch.KEY:
        try:
            return str(int(text))
        except ValueError:
            raise HoldError(f"a row key is an integer, not {text!r}") from None
    return text


# rows counted when a hold or an erasure reports what it matches now (beyond: "at least")
MATCH_COUNT_LIMIT = 100_000


@dataclass(frozen=True)
class ScopeValue:
    """A tenant, key or object id as the policy's table stores it (text), and how many of
    its rows match it now (None: not counted, e.g. the table is not there yet)."""

    value: str
    rows_matching: int | None

    def described(self, policy: Policy) -> str:
        if self.rows_matching is None:
            return f"table {policy.table} not found: no row matches it yet"
        more = " or more" if self.rows_matching >= MATCH_COUNT_LIMIT else ""
        return f"{self.rows_matching}{more} row(s) of {policy.table} match it now"


def scope_value(
    conn: Connection, policy: Policy, match: HoldMatch | str, value: object
) -> ScopeValue:
    """``value`` normalised through the type of the policy's column it is compared with
    (the deletes compare ``column::text``: "042" would never match an integer 42), with
    the rows it matches now. Refuses a scope the policy cannot match (an object on a policy
    without ``remote:``, a tenant without ``tenant_column``) or a value of another type:
    a hold or an erasure that matches nothing by mistake would look like one that works.
    """
    kind = HoldMatch(match)
    text = normalised_value(kind, value)
    if kind is HoldMatch.KEY:
        column = policy.key_column
    elif kind is HoldMatch.TENANT:
        if policy.tenant_column is None:
            raise HoldError(
                f"policy {policy.name!r} has no tenant_column: a tenant matches none of its "
                "rows; use a key or an object"
            )
        column = policy.tenant_column
    else:
        if policy.remote is None:
            raise HoldError(
                f"policy {policy.name!r} has no remote section: its rows name no objects; "
                "use a tenant or a key"
            )
        column = policy.remote.object_id_column
    spec = policy.table_spec
    statement = query(
        "hold_scope_value",
        table=sql.Identifier(spec.schema, spec.name),
        column=sql.Identifier(column),
    )
    params = {"column": column, "value": text, "count_limit": MATCH_COUNT_LIMIT}
    try:
        with conn.transaction():
            row = conn.execute(statement, params).fetchone()
    except (
        psycopg.errors.UndefinedTable,
        psycopg.errors.UndefinedObject,  # its row type, when the table is not there
        psycopg.errors.UndefinedColumn,
    ):
        return ScopeValue(text, None)  # not created yet: nothing to read its type from
    except (psycopg.errors.DataError, psycopg.errors.InvalidTextRepresentation) as wrong:
        raise HoldError(
            f"{text!r} is not a value of {policy.table}.{column}: {wrong.diag.message_primary}"
        ) from None
    assert row is not None
    return ScopeValue(row["value"], int(row["rows_matching"]))


def place_hold(
    conn: Connection,
    *,
    policy: str | None,
    match: HoldMatch | str,
    value: object,
    reason: str,
    placed_by: str,
    known_policies: Collection[str] | None = None,
    target: Policy | None = None,
) -> Hold:
    """Record a new active hold and return it; checked first, so bad input writes nothing.

    ``policy`` None holds the match under every policy. ``known_policies``, when
    given, is the policies file's names: an unknown policy is refused. ``target``, the
    loaded policy ``policy`` names, normalises the value through its column's type (see
    :func:`scope_value`); an every-policy hold keeps the text as given.
    """
    try:
        kind = HoldMatch(match)
    except ValueError:
        raise HoldError(f"a hold matches a tenant, a key or an object, not {match!r}") from None
    text = normalised_value(kind, value)
    if target is not None:
        text = scope_value(conn, target, kind, text).value
    why = _reason(reason, "placing a hold")
    if policy is not None and known_policies is not None and policy not in known_policies:
        raise HoldError(
            f"unknown policy {policy!r}; known: {', '.join(sorted(known_policies)) or 'none'}"
        )
    if not placed_by.strip():
        raise HoldError("a hold is placed by someone: the user is empty")
    with conn.transaction():
        row = conn.execute(
            query("hold_place"),
            {
                "policy": policy,
                "match": kind,
                "value": text,
                "reason": why,
                "placed_by": placed_by,
            },
        ).fetchone()
    assert row is not None
    return Hold.from_row(row)


def lift_hold(conn: Connection, hold_id: int, *, reason: str, lifted_by: str) -> Hold:
    """Lift an active hold and make the operations it alone kept pending again.

    An unknown or already lifted hold is an error, and nothing is written.
    """
    why = _reason(reason, "lifting a hold")
    if not lifted_by.strip():
        raise HoldError("a hold is lifted by someone: the user is empty")
    with conn.transaction():
        row = conn.execute(
            query("hold_lift"), {"hold_id": hold_id, "reason": why, "lifted_by": lifted_by}
        ).fetchone()
        if row is None:
            raise HoldError(f"no active hold {hold_id}: unknown, or already lifted")
        hold = Hold.from_row(row)
        policies = [hold.policy] if hold.policy else _policies_with_held(conn)
        for name in policies:
            conn.execute(query("hold_release_operations"), {"policy": name})
    return hold


def _policies_with_held(conn: Connection) -> list[str]:
    rows = conn.execute(query("ops_held_policies")).fetchall()
    return [row["policy"] for row in rows]


def release_held_operations(conn: Connection, policy: str) -> int:
    """Held operations of ``policy`` no active hold keeps, pending again (a run's re-check
    of what the remote side held, or of a hold_column cleared since); returns how many."""
    with conn.transaction():
        return conn.execute(query("hold_release_operations"), {"policy": policy}).rowcount


def get_hold(conn: Connection, hold_id: int) -> Hold | None:
    row = conn.execute(query("hold_get"), {"hold_id": hold_id}).fetchone()
    return Hold.from_row(row) if row else None


def list_holds(
    conn: Connection,
    policy: str | None = None,
    *,
    include_lifted: bool = True,
    limit: int = LIST_LIMIT,
) -> list[Hold]:
    """Holds, newest first: ``policy``'s and every policy's (all when None)."""
    rows = conn.execute(
        query("hold_list"),
        {"policy": policy, "include_lifted": include_lifted, "limit": limit},
    ).fetchall()
    return [Hold.from_row(row) for row in rows]


def matching_holds(
    conn: Connection,
    policy_name: str,
    *,
    tenant: str | None = None,
    key: int | str | None = None,
    object_id: str | None = None,
) -> list[Hold]:
    """The active holds of ``policy_name`` (or of every policy) that match the tenant, the
    row key or the object id given (an argument left None is not asked), oldest first."""
    if tenant is None and key is None and object_id is None:
        return []
    rows = conn.execute(
        query("hold_matching"),
        {
            "policy": policy_name,
            "tenant": None if tenant is None else str(tenant),
            "key": None if key is None else str(key).strip(),
            "object_id": None if object_id is None else str(object_id),
        },
    ).fetchall()
    return [Hold.from_row(row) for row in rows]
