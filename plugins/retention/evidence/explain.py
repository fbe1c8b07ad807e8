"""Evidence on demand: one readable record per operation key, from durable state alone.

Answers seven questions: which object and version was selected; why it was
eligible; whether the deletion was confirmed and when; which event announced
it; how many attempts it took; which legal holds keep it (``holds``); and
what happens next. An object with derivatives (``remote.derivatives``) has one
operation per resource; the record of any of them lists every resource's state,
and names those its row waits on. A policy with ``children:`` counts tables among
an object's resources too: the record shows, for its row key, the rows still there
in the policy's table and each listed child (waiting with the row), or once the row
is gone the rows its ``retention.deleted`` event says were deleted, by table.

A policy without ``remote:`` makes no operation: a row key of such a policy has its
own record (:func:`explain_row`): whether the row is there, the same counts of its
tables, and the holds keeping it.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import psycopg
from psycopg import sql

from retention.db.connection import PAGE_STATEMENT_MS, Connection, bounded
from retention.db.sqlfiles import query
from retention.holds.store import Hold, HoldMatch, matching_holds
from retention.objects.finish import all_resources_confirmed
from retention.policy import Policy
from retention.rows.children import ROWS_COUNTED, TableRows, rows_of_key


class UnknownOperation(LookupError):
    """No operation has this key."""


def answer(status_code: int | None) -> str:
    """How an attempt was answered, for people: ``HTTP 404``, or ``no response``.

    A timeout or a refused connection has no status code; "HTTP None" read as if
    the API had answered something.
    """
    return "no response" if status_code is None else f"HTTP {status_code}"


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.datetime) else value


def explain(
    conn: Connection,
    key: str,
    resources_of: Mapping[str, Sequence[str]] | None = None,
    policies: Mapping[str, Policy] | None = None,
) -> dict[str, Any]:
    """The evidence record of one operation (JSON-friendly).

    ``resources_of`` names each policy's remote resources (``RemoteSpec.resources``)
    when the caller knows its policies: a resource the policy names but the object has
    no operation for keeps the row, and is listed as waited on. Without it, the
    object's operations are taken as all its resources. ``policies`` (by name) gives
    the local side of a policy with ``children:`` (``tables``, see :func:`_tables`);
    without it, or for a policy without children, ``tables`` is None."""
    op = conn.execute(query("explain_operation"), {"key": key}).fetchone()
    if op is None:
        raise UnknownOperation(f"no operation with key {key!r}")
    history = conn.execute(query("explain_attempts"), {"key": key}).fetchall()
    attempts = [h for h in history if h["kind"] == "attempt"]
    replays = [h for h in history if h["kind"] == "replay"]
    object_key = op["parent_key"] or key
    resources = conn.execute(query("explain_resources"), {"object_key": object_key}).fetchall()
    named = (resources_of or {}).get(op["policy"]) or [r["resource"] for r in resources]
    holds = matching_holds(
        conn, op["policy"], tenant=op["tenant"], key=op["row_key"], object_id=op["object_id"]
    )
    return {
        "operation_key": key,
        "resource": op["resource"],
        "object_key": object_key,
        "selected": {
            "policy": op["policy"],
            "policy_revision": op["policy_revision"],
            "table": op["table_name"],
            "row_key": op["row_key"],
            "object_id": op["object_id"],
            "tenant": op["tenant"],
            "version": op["version"],
        },
        "eligible_because": _eligibility(op),
        "deletion": {
            "state": op["state"],
            "confirmed": op["state"] == "done",
            "confirmed_at": _iso(op["done_at"]),
            "last_status_code": op["last_status_code"],
            "outcome_class": op["outcome_class"],
        },
        "event": None
        if op["event_id"] is None
        else {
            "event_id": op["event_id"],
            "type": "retention.deleted",
            "state": op["event_state"],
            "delivered_at": _iso(op["event_delivered_at"]),
            "delivery_attempts": op["event_attempts"],
            "last_status_code": op["event_last_status"],
        },
        "attempts": {
            "count": len(attempts),
            "deliberate_attempts": op["attempt_count"],
            "claims": op["claim_count"],
            "rate_limited": op["rate_limited_count"],
            "lease_expiries": op["lease_expiries"],
            "history": [
                {
                    "attempt": a["n"],
                    "at": _iso(a["at"]),
                    "status_code": a["status_code"],
                    "outcome": a["outcome_class"],
                    "duration_ms": round(a["duration_ms"], 1),
                }
                for a in attempts
            ],
        },
        "replays": [
            {"replay_id": r["n"], "at": _iso(r["at"]), "by": r["who"], "reason": r["reason"]}
            for r in replays
        ],
        "resources": [
            {
                "name": r["resource"],
                "operation_key": r["operation_key"],
                "state": r["state"],
                "confirmed_at": _iso(r["done_at"]),
                "last_status_code": r["last_status_code"],
                "failure_class": r["failure_class"],
                "reason": r["reason"],
                "attempts": r["attempt_count"],
            }
            for r in resources
        ],
        "row": _row(resources, named),
        "tables": _tables(conn, op, (policies or {}).get(op["policy"])),
        "holds": [hold.as_json() for hold in holds],
        "next": _next_step(op, resources, named, holds),
    }


def _row(resources: list[dict[str, Any]], named: Sequence[str]) -> dict[str, Any]:
    """Whether the row may go (every resource the policy names confirmed), and which
    resources it waits on (one without an operation yet too)."""
    states = {r["resource"]: r["state"] for r in resources}
    waiting = [name for name, state in states.items() if state != "done"]
    waiting += [name for name in named if name not in states]
    return {
        "all_resources_confirmed": all_resources_confirmed(states, named),
        "waiting_on": waiting,
    }


def _tables(conn: Connection, op: dict[str, Any], policy: Policy | None) -> dict[str, Any] | None:
    """The local side of the object: for a policy with ``children:`` (of the table the
    operation was made for), the rows of the policy's table and of each listed child
    still there for the row key, counted up to :data:`ROWS_COUNTED` each through the
    children's foreign keys (``present``); once the row is gone, the rows its
    ``retention.deleted`` event says were deleted, by table (``deleted``)."""
    if policy is None or not policy.children or op["table_name"] != policy.table:
        return None
    counted = _count_family(conn, policy, op["row_key"])
    if isinstance(counted, dict):
        return counted
    row = counted[0]
    if row.rows:
        return {
            "state": "present",
            "source": "database",
            "counts": [one.as_json() for one in counted],
            "detail": f"still there for row {op['row_key']}, waiting with the row: they go "
            "with it in the finish transaction that deletes it"
            + (
                f" (each table counted up to {ROWS_COUNTED})"
                if any(one.more for one in counted)
                else ""
            ),
        }
    recorded = op["event_tables"]
    if isinstance(recorded, dict):
        order = [one.table for one in counted]
        tables = sorted(recorded, key=lambda t: order.index(t) if t in order else len(order))
        return {
            "state": "deleted",
            "source": "event",
            "counts": [TableRows(t, int(recorded[t])).as_json() for t in tables],
            "detail": f"row {op['row_key']} is gone; deleted with it, as its "
            f"retention.deleted event {op['event_id']} records",
        }
    return {
        "state": "deleted",
        "source": None,
        "counts": [],
        "detail": f"row {op['row_key']} is gone; the rows deleted with it are recorded by "
        "table only in a retention.deleted event, and this object has none (the policy "
        "does not notify, or the event was purged)",
    }


def _count_family(
    conn: Connection, policy: Policy, row_key: int
) -> list[TableRows] | dict[str, Any]:
    """The rows of the policy's table and of each listed child still there for
    ``row_key`` (:func:`rows_of_key`: its caps and timeouts), the policy's first; or the
    ``not counted`` tables record, when the table cannot be read or the row itself could
    not be looked up in time."""
    try:
        counted = rows_of_key(conn, policy, row_key)
    except psycopg.Error as failed:  # the table changed since: the record still answers
        first = str(failed).splitlines()[0] if str(failed) else type(failed).__name__
        return {
            "state": "not counted",
            "source": "database",
            "counts": [],
            "detail": f"the rows of row {row_key} could not be counted: {first}",
        }
    if counted[0].rows is None:
        return {
            "state": "not counted",
            "source": "database",
            "counts": [one.as_json() for one in counted],
            "detail": f"row {row_key} could not be looked up in time (the policy's "
            f"statement_ms, at most {PAGE_STATEMENT_MS} ms for the whole lookup); ask again later",
        }
    return counted


def _blocked(resources: list[dict[str, Any]], named: Sequence[str]) -> str:
    """``thumbnails dead (http_403: …)``: the resources the row waits on, for people."""
    present = {r["resource"] for r in resources}
    return "; ".join(
        [
            f"{r['resource']} {r['state']}"
            + (f" ({r['failure_class']}: {r['reason']})" if r["state"] == "dead" else "")
            for r in resources
            if r["state"] != "done"
        ]
        + [
            f"{name} not enqueued yet (the next pass enqueues it)"
            for name in named
            if name not in present
        ]
    )


def _eligibility(op: dict[str, Any]) -> dict[str, Any]:
    if op["window_cutoff"] is None:
        return {"reason": "enqueued outside a recorded window", "window_key": op["window_key"]}
    return {
        "reason": (
            f"row {op['row_key']} of {op['table_name']} was older than the cutoff "
            f"{op['window_cutoff'].isoformat()} of run {op['window_run_id']}"
        ),
        "cutoff": _iso(op["window_cutoff"]),
        "run_id": op["window_run_id"],
        "dag_id": op["run_dag_id"],
        "logical_date": _iso(op["run_logical_date"]),
        "anchor": op["run_anchor_source"],
        "window_key": op["window_key"],
        "window_ids": [op["first_id"], op["last_id"]],
    }


def _next_step(
    op: dict[str, Any], resources: list[dict[str, Any]], named: Sequence[str], holds: list[Hold]
) -> dict[str, Any]:
    state = op["state"]
    if state == "held" or (holds and state in ("pending", "in_flight")):
        named = "; ".join(hold.described for hold in holds) or op["reason"]
        lift = ", ".join(f"holds lift {hold.hold_id}" for hold in holds)
        return {
            "action": "legal hold",
            "at": None,
            "detail": f"kept by {named}. Nothing is called while it holds; lifting it "
            + (f"({lift} --reason …) " if lift else "")
            + "makes the operation pending again (a remote side's hold is re-checked by "
            "the next run).",
        }
    if state == "done" and not all_resources_confirmed(
        {r["resource"]: r["state"] for r in resources}, named
    ):
        dead = any(r["state"] == "dead" for r in resources)
        return {
            "action": "human review" if dead else "waiting for the other resources",
            "at": None,
            "detail": f"{op['resource']} is deleted remotely; the row stays until every "
            f"resource of the object is confirmed: {_blocked(resources, named)}"
            + (". Fix the cause, then replay it with the retention__replay DAG." if dead else ""),
        }
    if state == "pending":
        return {
            "action": "automatic retry",
            "at": _iso(op["not_before"]),
            "detail": f"the next worker after {op['not_before'].isoformat()} calls the API again "
            f"with the same idempotency key (last: {op['reason'] or 'not tried yet'})",
        }
    if state == "in_flight":
        return {
            "action": "in progress",
            "at": _iso(op["lease_expires_at"]),
            "detail": f"held by {op['lease_owner']}; reclaimable if its lease expires",
        }
    if state == "dead":
        return {
            "action": "human review",
            "at": None,
            "detail": f"{op['failure_class']}: {op['reason']}. Fix the cause, then replay it with "
            "the retention__replay DAG.",
        }
    return {
        "action": "none",
        "at": None,
        "detail": "deleted remotely and locally; kept as evidence"
        if len(resources) < 2
        else "every resource deleted remotely, and the row locally; kept as evidence",
    }


def render(record: dict[str, Any]) -> str:
    """The record as text for a terminal."""
    s, e, d, a, n = (
        record["selected"],
        record["eligible_because"],
        record["deletion"],
        record["attempts"],
        record["next"],
    )
    event = record["event"]
    lines = [
        f"operation {record['operation_key']}"
        + (
            f" ({record['resource']} of object {record['object_key']})"
            if record["resource"] != "object"
            else ""
        ),
        f"  selected:   object {s['object_id']} (tenant {s['tenant']}), version {s['version']}, "
        f"row {s['row_key']} of {s['table']}, policy {s['policy']} rev {s['policy_revision']}",
        f"  eligible:   {e['reason']}",
        f"  deletion:   {d['state']}"
        + (
            f", confirmed at {d['confirmed_at']} ({answer(d['last_status_code'])})"
            if d["confirmed"]
            else ""
        ),
        "  event:      "
        + (
            f"{event['event_id']} ({event['type']}), {event['state']}"
            + (f" at {event['delivered_at']}" if event["delivered_at"] else "")
            if event
            else "none"
        ),
        f"  attempts:   {a['count']} API attempts ({a['deliberate_attempts']} counting toward "
        f"max_attempts, {a['rate_limited']} rate limited), {a['claims']} claims, "
        f"{a['lease_expiries']} lease expiries",
    ]
    lines += [
        f"    #{h['attempt']} {h['at']}  {h['outcome']} "
        f"({answer(h['status_code'])}) {h['duration_ms']} ms"
        for h in a["history"]
    ]
    if len(record["resources"]) > 1:  # the object and its derivatives
        row = record["row"]
        lines.append(
            "  resources:  "
            + (
                "all confirmed"
                if row["all_resources_confirmed"]
                else "the row waits on " + ", ".join(row["waiting_on"])
            )
        )
        lines += [
            f"    {r['name']}: {r['state']}"
            + (f" at {r['confirmed_at']}" if r["confirmed_at"] else "")
            + (f" ({answer(r['last_status_code'])})" if r["attempts"] else "")
            + (f", {r['failure_class']}: {r['reason']}" if r["state"] == "dead" else "")
            + f", key {r['operation_key']}"
            for r in record["resources"]
        ]
    lines += _table_lines(record.get("tables"))
    lines += [f"  replayed:   {r['at']} by {r['by']}: {r['reason']}" for r in record["replays"]]
    lines += [
        f"  held by:    hold {h['id']} ({h['match']} {h['value']}, "
        f"{h['policy'] or 'every policy'}), placed {h['placed_at']} by {h['placed_by']}: "
        f"{h['reason']}"
        for h in record.get("holds", [])
    ]
    lines.append(
        f"  next:       {n['action']}" + (f" at {n['at']}" if n["at"] else "") + f"; {n['detail']}"
    )
    return "\n".join(lines)


def _table_lines(tables: dict[str, Any] | None) -> list[str]:
    """The ``tables`` section of a record as text (none for ``tables: null``)."""
    if not tables:
        return []
    still = " row(s) still there"
    what = {"present": still, "gone": still, "deleted": " row(s) deleted"}
    return [f"  tables:     {tables['state']}: {tables['detail']}"] + [
        f"    {t['table']}: "
        + TableRows(t["table"], t["rows"], t["more"], t.get("not_counted")).shown()
        + (what.get(tables["state"], "") if t["rows"] is not None else "")
        for t in tables["counts"]
    ]


# The rows of a policy without ``remote:`` have no operation: explain answers a row key
# of such a policy (``explain --policy P KEY``) with the row's own record.

KEY_BOUNDS = {"smallint": 2**15, "integer": 2**31, "bigint": 2**63}
INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")


class NotARowKey(ValueError):
    """A term that is no value of a policy's key column."""


def row_key_of(conn: Connection, policy: Policy, term: str) -> int:
    """``term`` as a value of the policy's key column, of the type the catalog gives it
    (bigint while the table is not there: a key column is an integer column), or
    :class:`NotARowKey` naming the column and its type. Reads the catalog only."""
    spec = policy.table_spec
    columns = {
        row["column_name"]: row["column_type"]
        for row in conn.execute(
            query("target_columns"), {"schema": spec.schema, "table": spec.name}
        )
    }
    kind = columns.get(policy.key_column, "bigint")
    bound = KEY_BOUNDS.get(kind, KEY_BOUNDS["bigint"])
    text = term.strip()
    if INTEGER_TEXT.fullmatch(text) and -bound <= int(text) < bound:
        return int(text)
    raise NotARowKey(
        f"{term!r} is not a row key of policy {policy.name!r}: its key column "
        f"{policy.table}.{policy.key_column} is {kind} (an integer from {-bound} to "
        f"{bound - 1})"
    )


TENANT_NOT_READ = "tenant not read; tenant holds not checked"


def _tenant_of(
    conn: Connection, policy: Policy, row_key: int, within_ms: int
) -> tuple[str | None, str | None]:
    """The tenant of the row, as text (what a tenant hold's value is compared with), and
    None; or None and why it is not known when it could not be read: no time left of the
    lookup's deadline (``within_ms``, what the counts left of it), a timeout or an error.
    (None, None): no ``tenant_column``, or no such row."""
    if policy.tenant_column is None:
        return None, None
    if within_ms <= 0:
        return None, f"{TENANT_NOT_READ} (no time left of the lookup's {PAGE_STATEMENT_MS} ms)"
    spec = policy.table_spec
    statement = query(
        "explain_row_tenant",
        tenant=sql.Identifier(policy.tenant_column),
        table=sql.Identifier(spec.schema, spec.name),
        key=sql.Identifier(policy.key_column),
    )
    timeouts = replace(
        policy.timeouts,
        statement_ms=min(policy.timeouts.statement_ms, within_ms),
        lock_ms=min(policy.timeouts.lock_ms, within_ms),
    )
    try:
        with bounded(conn, timeouts):
            row = conn.execute(statement, {"row_key": row_key}).fetchone()
    except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable):
        return None, f"{TENANT_NOT_READ} (timed out)"
    except psycopg.Error as failed:  # the holds of its key are still shown
        first = str(failed).splitlines()[0] if str(failed) else type(failed).__name__
        return None, f"{TENANT_NOT_READ} ({first})"
    return (None if row is None else row["tenant"]), None


def _not_keeping(hold: Hold, row_key: int, not_its_tenant: str) -> str:
    """Why a hold whose value is the term asked does not keep row ``row_key``
    (``not_its_tenant``: why for a tenant hold)."""
    if hold.match == HoldMatch.TENANT:
        return not_its_tenant
    if hold.match == HoldMatch.OBJECT:
        return "an object hold: a policy without remote: deletes rows, not objects"
    return f"not row {row_key}'s key"


def explain_row(
    conn: Connection, policy: Policy, row_key: int, named_by_term: Sequence[Hold] = ()
) -> dict[str, Any]:
    """The record of one row key of a policy without ``remote:`` (JSON-friendly): whether
    its row is in the policy's table and, with ``children:``, the rows of each table still
    there for it (:func:`rows_of_key`, as an operation's ``tables``), and the holds
    keeping it (``holds``): those of its key and of its row's tenant, of the policy or
    of every policy, as a run's batches match them. ``named_by_term`` (the holds whose
    value is the term asked, whatever they match) that do not keep the row are listed
    apart (``also_named``), each with why not: a tenant hold "42" does not keep row 42
    of tenant 7. The whole lookup has one deadline (``PAGE_STATEMENT_MS``): the tenant is
    read within what the counts left of it; when it is not read, the record says so and
    that its tenant holds were not checked. A row that is not there is ``gone``: such a
    policy sends no ``retention.deleted`` event (``notify:`` needs ``remote:``), so
    nothing records what was deleted with one row."""
    deadline = time.monotonic() + PAGE_STATEMENT_MS / 1000
    counted = _count_family(conn, policy, row_key)
    present = not isinstance(counted, dict) and bool(counted[0].rows)
    tenant, unread = (
        _tenant_of(conn, policy, row_key, int((deadline - time.monotonic()) * 1000))
        if present
        else (None, None)
    )
    if policy.tenant_column is None:
        not_its_tenant = "the policy has no tenant_column: no tenant hold keeps its rows"
    elif isinstance(counted, dict):
        unread = f"{TENANT_NOT_READ} (the row could not be looked up)"
        not_its_tenant = unread
    elif not present:
        not_its_tenant = "the row is not there"
    else:
        not_its_tenant = unread or (
            "not this row's tenant "
            + ("(it has none)" if tenant is None else f"(its tenant is {tenant})")
        )
    holds = matching_holds(conn, policy.name, tenant=tenant, key=row_key)
    keeping = {hold.hold_id for hold in holds}
    also_named = [
        {**hold.as_json(), "why_not": _not_keeping(hold, row_key, not_its_tenant)}
        for hold in sorted(named_by_term, key=lambda one: one.hold_id)
        if hold.hold_id not in keeping
    ]
    family = bool(policy.children)
    tables: dict[str, Any] | None
    if isinstance(counted, dict):
        row = {"state": "not counted", "detail": counted["detail"]}
        tables = counted if family else None
    elif present:
        capped = any(one.more for one in counted)
        row = {
            "state": "present",
            "detail": f"in {policy.table}; "
            + (
                "kept by " + ", ".join(f"hold {hold.hold_id}" for hold in holds) + ": no run "
                "deletes it while a hold keeps it (lift with holds lift ID --reason …)"
                if holds
                else "a run of the policy deletes it once it is older than the run's cutoff"
            )
            + (", its children with it in the same batch" if family and not holds else "")
            + (
                f"; {unread}" + ("" if holds else ": a hold of its tenant may keep it")
                if unread
                else ""
            ),
        }
        tables = (
            {
                "state": "present",
                "source": "database",
                "counts": [one.as_json() for one in counted],
                "detail": f"still there for row {row_key}, waiting with the row: they go "
                "with it in the batch that deletes it"
                + (f" (each table counted up to {ROWS_COUNTED})" if capped else ""),
            }
            if family
            else None
        )
    else:
        row = {
            "state": "gone",
            "detail": f"not in {policy.table}: deleted (by a run, an erasure or by hand) or "
            "never there; a policy without remote: sends no retention.deleted event, so "
            "nothing records the rows deleted with one row (runs --policy counts a run's "
            "rows by table)",
        }
        tables = (
            {
                "state": "gone",
                "source": "database",
                "counts": [one.as_json() for one in counted],
                "detail": f"no row of any table is there for row {row_key}",
            }
            if family
            else None
        )
    return {
        "policy": policy.name,
        "table": policy.table,
        "key_column": policy.key_column,
        "row_key": row_key,
        "row": row,
        "tables": tables,
        "holds": [hold.as_json() for hold in holds],
        "also_named": also_named,
    }


def render_row(record: dict[str, Any]) -> str:
    """A row key's record as text: first the holds keeping it, one line each as the
    command line has always named them (``held by hold 7 (key 42, …)``), then the row
    and its tables, then the holds whose value is the term asked that do not keep it
    (``also named 42, not keeping this row: hold 8 (tenant 42, …) — not this row's
    tenant (its tenant is 7)``)."""
    lines = [
        f"held by hold {h['id']} ({h['match']} {h['value']}, "
        + (f"policy {h['policy']}" if h["policy"] else "every policy")
        + f": {h['reason']})"
        for h in record["holds"]
    ]
    row = record["row"]
    lines.append(
        f"row {record['row_key']} of policy {record['policy']} "
        f"({record['table']}.{record['key_column']})"
    )
    lines.append(f"  row:        {row['state']}: {row['detail']}")
    lines += _table_lines(record["tables"])
    lines += [
        f"also named {h['value']}, not keeping this row: hold {h['id']} ({h['match']} "
        f"{h['value']}, "
        + (f"policy {h['policy']}" if h["policy"] else "every policy")
        + f": {h['reason']}) — {h['why_not']}"
        for h in record.get("also_named", [])
    ]
    return "\n".join(lines)
