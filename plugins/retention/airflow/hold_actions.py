"""Legal holds from the web: one set of rules for the JSON API and the Retention view.

Placing or lifting a hold needs the right to trigger the policy's DAG
(``retention__<policy>``), asked of Airflow's auth manager; an every-policy hold
needs it for every policy. A hold lives in the database of the policies it covers
(an every-policy hold is placed in each database of the policies file, so every
policy's deletes see it). Bad input (an empty reason, an unknown policy, a key that
is not an integer) is refused before anything is written. Every change records the
Airflow user who made it.

Answers, raised as :class:`~retention.airflow.lookup.LookupRefused`: 403 for a user
without the right; 404 for a hold that is not active (or not theirs to see); 422 for
bad input; 503 when a database did not answer (nothing is written then, or the
message says what was).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from retention.airflow.lookup import NO_LEDGER, LookupRefused, read_each_database
from retention.db.connection import Connection
from retention.holds.store import (
    Hold,
    HoldError,
    HoldMatch,
    get_hold,
    lift_hold,
    list_holds,
    normalised_value,
    place_hold,
    scope_value,
)
from retention.policy import Policy

MayTrigger = Callable[[str], bool]  # asked with a DAG id


def _covered(policies: list[Policy], policy: str | None) -> list[Policy]:
    if policy is None:
        return policies
    chosen = [p for p in policies if p.name == policy]
    if not chosen:  # the names are not listed: a user may not read every policy's DAG
        raise LookupRefused(422, f"unknown policy {policy!r}: no such policy is loaded")
    return chosen


def _require_right(covered: list[Policy], may_trigger: MayTrigger, doing: str) -> None:
    refused = [p.dag_id for p in covered if not may_trigger(p.dag_id)]
    if refused:
        raise LookupRefused(
            403,
            f"{doing} needs the right to trigger the DAG of every policy it covers; you may "
            f"not trigger {', '.join(repr(d) for d in refused)}; ask an admin.",
        )


def parse_place(body: Mapping[str, Any]) -> tuple[str | None, HoldMatch, str, str]:
    """``{"policy"?, "match": "tenant"|"key"|"object", "value", "reason"}`` checked."""
    policy = body.get("policy") or None
    if policy is not None and not isinstance(policy, str):
        raise LookupRefused(422, "policy must be a policy name, or left out for every policy")
    try:
        match = HoldMatch(str(body.get("match", "")))
        value = normalised_value(match, body.get("value"))
    except ValueError as wrong:
        text = str(wrong) if isinstance(wrong, HoldError) else "match is tenant, key or object"
        raise LookupRefused(422, text) from None
    reason = str(body.get("reason") or "").strip()
    if not reason:
        raise LookupRefused(422, "placing a hold needs a reason: say who asked and why")
    return policy, match, value, reason


def place(
    policies: list[Policy],
    body: Mapping[str, Any],
    user_name: str,
    may_trigger: MayTrigger,
) -> list[dict[str, Any]]:
    """Place the hold ``body`` describes in each database it covers; the holds placed."""
    policy, match, value, reason = parse_place(body)
    covered = _covered(policies, policy)
    _require_right(covered, may_trigger, "placing a hold")

    target = covered[0] if policy is not None else None  # its column types the value

    def placed(conn: Connection, _members: list[Policy]) -> dict[str, Any]:
        hold = place_hold(
            conn,
            policy=policy,
            match=match,
            value=value,
            reason=reason,
            placed_by=user_name,
            target=target,
        )
        answer = hold.as_json()
        if target is not None:  # what it keeps now, so a value that matches nothing shows
            answer["rows_matching"] = scope_value(conn, target, match, hold.value).rows_matching
        return answer

    try:
        done = read_each_database(covered, placed, what="retention hold")
    except HoldError as wrong:
        raise LookupRefused(422, str(wrong)) from None
    if done.unanswered:
        raise LookupRefused(
            503,
            f"placed in {len(done.answers)} database(s), but not in: "
            + "; ".join(done.problems())
            + ". Place it again there when they answer.",
        )
    return list(done.answers.values())


def lift(
    policies: list[Policy],
    hold_id: int,
    reason: Any,
    user_name: str,
    may_trigger: MayTrigger,
    may_read: MayTrigger,
) -> dict[str, Any]:
    """Lift active hold ``hold_id`` (found among the databases of the policies the user
    may read), after checking the right for every policy it covers."""
    why = str(reason or "").strip()
    if not why:
        raise LookupRefused(422, "lifting a hold needs a reason: say who decided and why")
    readable = [p for p in policies if may_read(p.dag_id)]
    gone = LookupRefused(404, f"no active hold {hold_id}")

    def find(conn: Connection, _members: list[Policy]) -> Hold | None:
        try:
            return get_hold(conn, hold_id)
        except NO_LEDGER:
            return None

    found = read_each_database(readable, find, what="retention hold")
    matches = {
        conn_id: hold
        for conn_id, hold in found.answers.items()
        if hold is not None and hold.active and (hold.policy is None or _named(readable, hold))
    }
    if not matches:
        if found.unanswered:
            raise LookupRefused(503, "could not read " + "; ".join(found.problems()))
        raise gone
    if len(matches) > 1:
        raise LookupRefused(
            409,
            f"hold {hold_id} exists in {len(matches)} databases; lift it with the command "
            "line against the database you mean (holds lift ID --conn-id …)",
        )
    ((conn_id, hold),) = matches.items()
    _require_right(_covered(policies, hold.policy), may_trigger, "lifting a hold")
    target = [p for p in policies if p.postgres_conn_id == conn_id][:1]

    def lifted(conn: Connection, _members: list[Policy]) -> Hold:
        return lift_hold(conn, hold_id, reason=why, lifted_by=user_name)

    try:
        done = read_each_database(target, lifted, what="retention hold")
    except HoldError:
        raise gone from None
    if done.unanswered:
        raise LookupRefused(503, "could not lift it: " + "; ".join(done.problems()))
    return done.answers[conn_id].as_json()


def _named(readable: list[Policy], hold: Hold) -> bool:
    return any(p.name == hold.policy for p in readable)


def listing(
    policies: list[Policy], may_read: MayTrigger, policy: str | None = None, limit: int = 200
) -> tuple[list[dict[str, Any]], list[str]]:
    """The holds of the policies the user may read (and every-policy holds), newest first,
    with the databases that did not answer."""
    readable = [p for p in policies if may_read(p.dag_id)]
    if policy is not None:
        readable = [p for p in readable if p.name == policy]
    names = {p.name for p in readable}

    def holds_in(conn: Connection, members: list[Policy]) -> list[Hold]:
        try:
            found = list_holds(conn, policy, limit=limit)
        except NO_LEDGER:
            return []
        return [h for h in found if h.policy is None or h.policy in names]

    read = read_each_database(readable, holds_in, what="retention holds")
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    for conn_id, holds in read.answers.items():
        for hold in holds:
            rows[(hold.hold_id, conn_id)] = hold.as_json()
    ordered = sorted(rows.values(), key=lambda h: (h["placed_at"], h["id"]), reverse=True)
    return ordered[:limit], read.problems()
