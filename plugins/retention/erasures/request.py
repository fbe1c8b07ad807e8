"""Recording an erasure request: validated where it is typed, idempotent on its key.

Every entry point (the CLI, the plugin's JSON API, a signed hint) goes through
:func:`request_erasure`. Bad input fails once, with the fix, and writes nothing;
the same request twice (the same request key) answers with the erasure it made
the first time.

Request keys share one unique column, so each entry point keeps to its own part of it:
an urgent hint's keys are ``hint:<webhook-id>:<object>`` (:func:`hint_request_key`),
and a key a person or a client gives may not start with ``hint:``. Otherwise an API
caller could take the key a hint will use (the hint would then be answered with that
caller's erasure, or refused as a conflict) or read another policy's erasure through
the conflict's message. The CLI and the API share their part on purpose: a request
retried through the other door is the same request.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.holds.store import HoldError, scope_value
from retention.policy.model import Policy

DEFAULT_DEADLINE = dt.timedelta(days=30)  # GDPR allows one month
HINT_KEY_PREFIX = "hint:"  # the request keys of urgent hints, and theirs only
# The DAG that works open erasures (dags/retention_erasures.py). The dash keeps it out of
# the policies' DAG ids, retention__<name>, whose names are letters, digits and underscores.
ERASURE_DAG_ID = "retention__erasure-requests"


class Scope(StrEnum):
    """What an erasure matches: a tenant, a row key, or an object id."""

    TENANT = "tenant"
    KEY = "key"
    OBJECT = "object"


class ErasureState(StrEnum):
    REQUESTED = "requested"
    RUNNING = "running"
    DONE = "done"
    BLOCKED_BY_HOLD = "blocked_by_hold"
    FAILED = "failed"


FINAL_STATES = frozenset({ErasureState.DONE, ErasureState.BLOCKED_BY_HOLD, ErasureState.FAILED})


class ErasureRejected(ValueError):
    """A request that is refused as typed; nothing was written."""


class ErasureKeyConflict(ErasureRejected):
    """A request key already names an erasure of something else (another policy, scope,
    value or reason): answering with that erasure would tell the caller its request was
    recorded when it was not. Nothing was written."""


@dataclass(frozen=True, kw_only=True)
class ErasureRequest:
    """A validated request: its policy, scope, reason, who asked and by when."""

    policy: Policy
    scope: Scope
    value: str
    reason: str
    requested_by: str
    deadline: dt.datetime | None = None
    request_key: str = ""

    @property
    def key(self) -> str:
        """The request key given, or one derived from what is asked: the same policy, scope
        and reason twice is one erasure (a new request for the same scope says a new reason
        or gives its own key)."""
        if self.request_key:
            return self.request_key
        text = f"{self.policy.name}|{self.scope.value}|{self.value}|{self.reason.strip()}"
        return "erq_" + hashlib.sha256(text.encode()).hexdigest()[:32]


def validate(
    policies: dict[str, Policy],
    *,
    policy: str,
    scope: str,
    value: Any,
    reason: str | None,
    requested_by: str,
    deadline: dt.datetime | None = None,
    request_key: str | None = None,
    now: dt.datetime | None = None,
) -> ErasureRequest:
    """The request, or :class:`ErasureRejected` naming what is wrong and the fix (pure)."""
    chosen = policies.get(policy)
    if chosen is None:
        raise ErasureRejected(
            f"erase: unknown policy {policy!r}; policies: {sorted(policies)}. Nothing was written."
        )
    if not reason or not str(reason).strip():
        raise ErasureRejected(
            "erase: the reason is empty; say why (for example the request's ticket), it is "
            "kept with the erasure and its receipt. Nothing was written."
        )
    try:
        kind = Scope(scope)
    except ValueError as bad:
        raise ErasureRejected(
            f"erase: unknown scope {scope!r}; give one of --tenant, --key or --object. "
            "Nothing was written."
        ) from bad
    text = "" if value is None else str(value)
    if not text:
        raise ErasureRejected(f"erase: the {kind.value} is empty. Nothing was written.")
    if kind is Scope.TENANT and chosen.tenant_column is None:
        raise ErasureRejected(
            f"erase: policy {policy!r} has no tenant_column, so it cannot erase by tenant; "
            "erase by --key or --object instead. Nothing was written."
        )
    if kind is Scope.OBJECT and chosen.remote is None:
        raise ErasureRejected(
            f"erase: policy {policy!r} has no remote section, so its rows name no objects; "
            "erase by --tenant or --key instead. Nothing was written."
        )
    if kind is Scope.KEY:
        try:
            int(text)
        except ValueError as bad:
            raise ErasureRejected(
                f"erase: the key {text!r} is not an integer; policy {policy!r} keys rows by "
                f"the integer column {chosen.key_column!r}. Nothing was written."
            ) from bad
    if request_key and request_key.startswith(HINT_KEY_PREFIX):
        raise ErasureRejected(
            f"erase: the request key {request_key!r} starts with {HINT_KEY_PREFIX!r}, which "
            "only urgent hints' keys do (hint:<webhook-id>:<object>); give a key without "
            "that prefix. Nothing was written."
        )
    if deadline is not None:
        if deadline.tzinfo is None:
            raise ErasureRejected(
                f"erase: the deadline {deadline.isoformat()} needs a time zone, for example "
                f"{deadline.replace(tzinfo=dt.UTC).isoformat()}. Nothing was written."
            )
        if deadline <= (now or dt.datetime.now(dt.UTC)):
            raise ErasureRejected(
                f"erase: the deadline {deadline.isoformat()} is in the past; give a later one "
                "(by default an erasure is due 30 days after it is requested). "
                "Nothing was written."
            )
    return ErasureRequest(
        policy=chosen,
        scope=kind,
        value=text,
        reason=str(reason).strip(),
        requested_by=requested_by,
        deadline=deadline,
        request_key=request_key or "",
    )


def hint_request_key(webhook_id: str, object_id: str) -> str:
    """The request key of an urgent hint's erasure of one object: a redelivered hint (the
    same ``webhook-id``) is the same erasures. :func:`validate` refuses such a key from
    anyone else."""
    return f"{HINT_KEY_PREFIX}{webhook_id}:{object_id}"


def request_erasure(conn: Connection, request: ErasureRequest) -> tuple[dict[str, Any], bool]:
    """Record the request once; returns the erasure's row (with ``rows_matching``, the
    policy's rows in the scope now) and whether this call made it.

    The scope's value is first read through its column's type, as the deletes compare
    it (tenant "042" of an integer column is 42); a value of another type is refused.
    """
    try:
        normal = scope_value(conn, request.policy, request.scope.value, request.value)
    except HoldError as wrong:
        raise ErasureRejected(f"erase: {wrong}. Nothing was written.") from None
    request = replace(request, value=normal.value)
    params = {
        "request_key": request.key,
        "policy": request.policy.name,
        "scope": request.scope.value,
        "value": request.value,
        "reason": request.reason,
        "requested_by": request.requested_by,
        "deadline": request.deadline,
    }
    with conn.transaction():
        row = conn.execute(query("erasure_request"), params).fetchone()
        if row is not None:
            return {**row, "rows_matching": normal.rows_matching}, True
        known = conn.execute(query("erasure_by_key"), params).fetchone()
    assert known is not None
    asked = {name: params[name] for name in REQUEST_IDENTITY}
    recorded = {name: known[name] for name in REQUEST_IDENTITY}
    if asked != recorded:
        differs = ", ".join(name for name in REQUEST_IDENTITY if asked[name] != recorded[name])
        raise ErasureKeyConflict(
            f"erase: request key {request.key!r} already names erasure {known['erasure_id']} "
            f"of {recorded['scope']} {recorded['value']!r} in policy {recorded['policy']!r}, "
            f"which differs in {differs}; use a new request key for a new request. "
            "Nothing was written."
        )
    return {**known, "rows_matching": normal.rows_matching}, False


# What makes two requests with one key the same request (the deadline is left out: a
# retried "in 10 days" is a later time, and who asks may retry through another door).
REQUEST_IDENTITY = ("policy", "scope", "value", "reason")


def get_erasure(conn: Connection, erasure_id: int) -> dict[str, Any] | None:
    return conn.execute(query("erasure_get"), {"erasure_id": erasure_id}).fetchone()


# How long after an erasure failed the late-erasure alert still looks at it (it is told
# once, by the alert ledger; the window keeps old failures out of every pass's list).
FAILED_ALERT_WINDOW = dt.timedelta(days=7)


def list_erasures(
    conn: Connection,
    *,
    policy: str | None = None,
    open_only: bool = False,
    failed_since: dt.datetime | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """Erasures, newest first, each with ``late`` (unfinished past its deadline);
    ``open_only`` with ``failed_since``: the unfinished ones and those failed since."""
    return conn.execute(
        query("erasure_list"),
        {"policy": policy, "open_only": open_only, "failed_since": failed_since, "limit": limit},
    ).fetchall()
