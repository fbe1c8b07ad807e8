"""Signed inbound hints: upstream systems name objects that may be deleted sooner.

A hint only makes work eligible: it upserts pending operations under the same
operation keys the scheduled scan derives (so the scan and the hint meet on
one ledger row), due at ``due_at`` or now, and the policy's next drain step
deletes them. Nothing here calls the remote API, and the scan stays the
reconciliation path. A hint never shortens retention: an object whose rows are
all younger than ``now − retain_days`` is refused, as every cutoff is bounded
(``retention.rows.cutoff``).

A hint with ``"priority": "urgent"`` (and a ``reason``) is different: each of its
objects is an erasure request, which ignores ``retain_days`` by design. It is
parsed here and recorded by the API (``retention.airflow.api``) as erasures
(``retention.erasures``), one per object, keyed by the hint's ``webhook-id`` and
the object, so a redelivered hint is the same erasures.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query
from retention.objects.enqueue import enqueue_derivatives
from retention.policy.model import Policy
from retention.rows.cutoff import latest_cutoff
from retention.rows.target import TargetTable

MAX_BODY_BYTES = 256 * 1024
MAX_OBJECTS = 1000
MAX_DEPTH = 32
MAX_OFFSET = dt.timedelta(hours=14)  # the widest offset of any real time zone


class HintRejected(ValueError):
    """A hint that is refused; ``status`` is the HTTP answer and nothing was written."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Hint:
    webhook_id: str
    policy: Policy
    objects: list[tuple[str, dt.datetime | None]]
    # "urgent": each object is an erasure request (``retention.erasures``), worked now
    # whatever its rows' age; the API records those (this layer knows no erasures).
    priority: str = "routine"
    reason: str = ""


def verify(body: bytes, headers: dict[str, str], secret: str) -> None:
    """Standard Webhooks signature with its 5-minute timestamp tolerance."""
    try:
        Webhook(secret).verify(body, headers, json_parse=False)
    except WebhookVerificationError as bad:
        raise HintRejected(401, f"signature check failed: {bad}") from bad
    except Exception as bad:  # a malformed header or a body that is not UTF-8, not our bug
        raise HintRejected(
            401, f"signature check failed: malformed signature or body ({type(bad).__name__})"
        ) from bad


def parse(body: bytes, headers: dict[str, str], policies: dict[str, Policy]) -> Hint:
    """Validate the body ``{policy, objects: [{key, due_at?}]}``; 422 names what is wrong."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as bad:
        raise HintRejected(422, f"body is not JSON: {str(bad)[:200]}") from bad
    problem = _hostile(document)
    if problem:
        raise HintRejected(422, problem)
    if not isinstance(document, dict) or set(document) - {
        "policy",
        "objects",
        "priority",
        "reason",
    }:
        raise HintRejected(
            422,
            "body must be an object with 'policy', 'objects' and optionally 'priority' "
            "and 'reason' only",
        )
    priority = document.get("priority", "routine")
    if priority not in ("routine", "urgent"):
        raise HintRejected(422, f"'priority' must be 'routine' or 'urgent', not {priority!r}")
    reason = document.get("reason") or ""
    if priority == "urgent" and (not isinstance(reason, str) or not reason.strip()):
        raise HintRejected(
            422,
            "an urgent hint erases its objects now: 'reason' must say why (it is kept with "
            "each erasure and its receipt); nothing written",
        )
    name = document.get("policy")
    policy = policies.get(name) if isinstance(name, str) else None
    if policy is None or policy.remote is None:
        known = sorted(p for p, v in policies.items() if v.remote is not None)
        raise HintRejected(422, f"unknown policy {name!r}; hints are taken for {known}")
    objects = document.get("objects")
    if not isinstance(objects, list) or not objects:
        raise HintRejected(422, "'objects' must be a non-empty list of {key, due_at?}")
    if len(objects) > MAX_OBJECTS:
        raise HintRejected(413, f"{len(objects)} objects; at most {MAX_OBJECTS} per hint")
    parsed: list[tuple[str, dt.datetime | None]] = []
    for index, item in enumerate(objects):
        if not isinstance(item, dict) or set(item) - {"key", "due_at"} or "key" not in item:
            raise HintRejected(422, f"objects[{index}] must be {{key, due_at?}}")
        key = item["key"]
        if not isinstance(key, str | int) or isinstance(key, bool) or not str(key):
            raise HintRejected(422, f"objects[{index}].key must be a non-empty string")
        due = item.get("due_at")
        if due is not None and priority == "urgent":
            raise HintRejected(
                422, f"objects[{index}].due_at: an urgent hint is due now; leave due_at out"
            )
        if due is not None:
            try:
                due = dt.datetime.fromisoformat(str(due))
            except ValueError as bad:
                raise HintRejected(422, f"objects[{index}].due_at is not ISO 8601") from bad
            offset = due.utcoffset()
            if offset is None:
                raise HintRejected(422, f"objects[{index}].due_at needs a time zone")
            if offset % dt.timedelta(minutes=1) or abs(offset) > MAX_OFFSET:
                raise HintRejected(
                    422,
                    f"objects[{index}].due_at has the offset {offset}; use whole minutes "
                    "within ±14:00",
                )
        parsed.append((str(key), due))
    return Hint(
        headers.get("webhook-id", ""),
        policy,
        earliest_per_key(parsed),
        priority=priority,
        reason=str(reason).strip(),
    )


def earliest_per_key(
    objects: list[tuple[str, dt.datetime | None]],
) -> list[tuple[str, dt.datetime | None]]:
    """One entry per key, due at the earliest time named (no ``due_at`` means now)."""
    now = dt.datetime.now(dt.UTC)
    merged: dict[str, dt.datetime | None] = {}
    for key, due in objects:
        if key not in merged or (due or now) < (merged[key] or now):
            merged[key] = due
    return list(merged.items())


def apply(conn: Connection, hint: Hint) -> dict[str, Any]:
    """Upsert the hinted operations and the receipt in one transaction (or refuse all)."""
    policy = hint.policy
    target = TargetTable.of(policy.table_spec, policy.remote)
    keys = [key for key, _ in hint.objects]
    params = {
        "policy": policy.name,
        "revision": policy.revision,
        "table_name": policy.table,
        "keys": keys,
        "due": [due for _, due in hint.objects],
        # The cutoff guard: a hint never makes a row younger than retain_days eligible.
        "cutoff": latest_cutoff(policy.retain_days, dt.datetime.now(dt.UTC)),
    }
    with bounded(conn, policy.timeouts, timezone=policy.timestamp_timezone):
        known = {
            r["object_id"]: r["old_enough"]
            for r in conn.execute(target.query("hint_known_objects"), params)
        }
        unknown = [key for key in keys if key not in known]
        if unknown:
            raise HintRejected(
                422,
                f"unknown object(s) for policy {policy.name!r}: {unknown[:20]}; nothing written",
            )
        young = [key for key in keys if not known[key]]
        if young:
            raise HintRejected(
                422,
                f"object(s) whose rows are not yet older than retain_days "
                f"({policy.retain_days} days) for policy {policy.name!r}: {young[:20]}; a hint "
                "makes an old row's object due sooner, it never shortens retention; nothing "
                "written",
            )
        receipt = conn.execute(
            query("hint_receipt"),
            {"webhook_id": hint.webhook_id, "policy": policy.name, "objects": len(keys)},
        ).fetchone()
        if receipt is None:
            return {"duplicate": True, "webhook_id": hint.webhook_id, "operations": []}
        rows = conn.execute(target.query("hint_enqueue"), params).fetchall()
        enqueue_derivatives(conn, policy.remote, [r["operation_key"] for r in rows])
    return {
        "duplicate": False,
        "webhook_id": hint.webhook_id,
        "operations": sorted(r["operation_key"] for r in rows),
    }


def _hostile(document: Any) -> str | None:
    """What makes a parsed body unusable: NUL characters, or nesting deeper than MAX_DEPTH."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"JSON nested deeper than {MAX_DEPTH} levels"
        if isinstance(value, str) and "\x00" in value:
            return "NUL characters are not allowed"
        if isinstance(value, dict):
            stack.extend((key, depth + 1) for key in value)
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
    return None
