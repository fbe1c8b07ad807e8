"""Command line: ``python -m retention.cli COMMAND`` (with ``plugins/`` on ``PYTHONPATH``).

- ``migrate``: apply the ``retention`` schema's migrations (for a deploy pipeline;
  every policy DAG also runs them first, in ``migrate_schema``);
- ``dead-letters``: list dead operations awaiting review (``--failure-class``
  without a value lists the classes that exist);
- ``runs``: the latest runs (status, rows deleted so far, windows by state) and
  which run holds each policy's run lease;
- ``explain TERM``: the evidence record of one operation, found by its key, a
  key prefix, its object id or its row key (several matches are listed); with
  ``--policy P`` naming a policy without ``remote:`` (whose rows have no operation),
  the record of row key TERM: whether its row is there, with ``children:`` the rows
  of each table still there for it, and the holds keeping it (those of its key and
  its tenant; other holds whose value is TERM are listed as not keeping it), read
  through the policy's ``postgres_conn_id``;
- ``holds place|lift|list``: legal holds (``retention.holds``). ``holds place
  [--policy P] (--tenant T | --key K | --object O) --reason "…"`` (no ``--policy``:
  every policy, one hold in each policy database, each named on its own line with its
  connection and policies) prints the new hold's id as its last line; ``holds lift ID --reason
  "…"``; ``holds list [--policy P] [--json]``. The user recorded is ``--by``, else
  the login name;
- ``erase --policy P (--tenant T | --key K | --object O) --reason "…" [--deadline …]``:
  request an urgent erasure (idempotent on ``--request-key``, by default derived
  from the policy, scope and reason); the ``retention__erasure-requests`` DAG works
  it within a minute; the erasure's id is the last line printed;
- ``explain --erasure ID``: an erasure's state, deadline, counts and blocking holds;
  ``erasures [--policy P] [--json]`` lists them, newest first;
- ``schema``: print the policies file's JSON Schema (``--write`` refreshes the
  checked-in copy, the field table of docs/policies.md and the DAG steps of
  docs/runs.md);
  with ``--sql``, the ``retention`` schema as the migrations leave it, read from a
  scratch database it creates on ``--dsn``'s server (``--write``: into
  ``include/sql/schema.sql``).

Database commands connect through an Airflow connection id (``--conn-id``,
resolved as a task would, e.g. from ``AIRFLOW_CONN_<ID>``; default ``retention_target``)
or a libpq DSN (``--dsn``). Commands that write for a policy (``erase``, ``holds place
--policy``) use that policy's ``postgres_conn_id``, where its deletes look, and refuse a
``--conn-id`` naming another; an every-policy hold is placed in each policy's database,
and ``holds lift`` finds the hold among them. ``--dsn`` names one database explicitly.
Run from a checkout, the command loads the checkout's ``.local/env`` (written by
``make env``) itself, without overriding variables already set; ``make cli
ARGS="..."`` does the same with ``plugins/`` on the path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from retention.db.connection import Connection, connect_dsn
from retention.paths import load_local_env

if TYPE_CHECKING:
    from retention.policy import Policy

DEFAULT_CONN_ID = "retention_target"


def _connection(args: argparse.Namespace, conn_id: str | None = None) -> Connection:
    if args.dsn:
        return connect_dsn(args.dsn)
    from retention.airflow.connections import postgres

    return postgres(conn_id or args.conn_id or DEFAULT_CONN_ID)


class WrongDatabase(Exception):
    """A policy's write aimed at a database its deletes never read (nothing written)."""


def _policy_conn_id(args: argparse.Namespace, policy_name: str) -> str | None:
    """The connection a write for ``policy_name`` goes to: the policy's own
    ``postgres_conn_id`` (its holds and erasures must be where its deletes look), or None
    when ``--dsn`` names the database or the policy is not loaded (the default then).
    A ``--conn-id`` naming another connection is refused."""
    if args.dsn:
        return None
    policy = _loaded_policies().get(policy_name)
    if policy is None:
        return None
    if args.conn_id and args.conn_id != policy.postgres_conn_id:
        raise WrongDatabase(
            f"policy {policy_name!r} deletes through connection {policy.postgres_conn_id!r}, "
            f"not --conn-id {args.conn_id!r}: a hold or erasure there would never be seen; "
            "leave --conn-id out (the policy's connection is used)"
        )
    return policy.postgres_conn_id


def _every_conn_id(args: argparse.Namespace) -> list[str | None]:
    """The databases an every-policy hold covers: each loaded policy's connection, or the
    one database ``--dsn`` / ``--conn-id`` names (None: the default connection)."""
    if args.dsn or args.conn_id:
        return [None]
    conn_ids = sorted({p.postgres_conn_id for p in _loaded_policies().values()})
    return list(conn_ids) or [None]


def _policies_of(conn_id: str | None) -> str:
    """``policy a`` or ``policies a, b``: the loaded policies whose deletes read the
    database ``conn_id`` names, which the hold placed there keeps."""
    names = sorted(p.name for p in _loaded_policies().values() if p.postgres_conn_id == conn_id)
    return ("policy " if len(names) == 1 else "policies ") + ", ".join(names)


def _loaded_policies() -> dict[str, Any]:
    from retention.policy import load_policies

    return {p.name: p for p in load_policies().policies}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m retention.cli", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--conn-id",
        help=f"Airflow connection id (default: the policy's own, else {DEFAULT_CONN_ID})",
    )
    where.add_argument("--dsn", help="libpq connection string instead of a connection id")
    commands = parser.add_subparsers(dest="command", required=True)
    migrate = commands.add_parser("migrate", help="apply the retention schema's migrations")
    migrate.add_argument("--conn-id", dest="sub_conn_id", help="Airflow connection id")
    dead = commands.add_parser("dead-letters", help="list dead operations awaiting review")
    dead.add_argument("--policy")
    dead.add_argument(
        "--failure-class",
        nargs="?",
        const="",
        help="only this class; without a value: list the classes that exist, with counts",
    )
    dead.add_argument("--limit", type=int, default=100)
    dead.add_argument("--json", action="store_true", help="one JSON object per line")
    explain_cmd = commands.add_parser(
        "explain",
        help="the evidence record of one operation (by key, key prefix, object id or row "
        "key), or with --policy of a policy without remote: of one row key",
        description="The evidence record of one operation, found by its key, a key prefix, "
        "its object id or its row key. With --policy naming a policy without remote: (its "
        "rows have no operation), the record of one row key: whether the row is in the "
        "policy's table, with children: the rows of each table still there for it (each "
        "counted up to 1000, within the policy's statement_ms), and the holds keeping it; "
        "a term that is no value of the policy's key column is an error (exit 2).",
    )
    explain_cmd.add_argument(
        "term",
        nargs="?",
        metavar="KEY|PREFIX|OBJECT_ID|ROW_KEY",
        help="an operation key, its first digits (4 or more), an object id or a row key",
    )
    explain_cmd.add_argument("--erasure", type=int, metavar="ID", help="an erasure, by its id")
    explain_cmd.add_argument(
        "--policy",
        help="only operations of this policy; for a policy without remote:, TERM is a row "
        "key and the record is its row's",
    )
    explain_cmd.add_argument("--json", action="store_true")
    erase = commands.add_parser(
        "erase", help="request an urgent erasure of a tenant's, a key's or an object's data"
    )
    erase.add_argument("--policy", required=True)
    scope = erase.add_mutually_exclusive_group(required=True)
    scope.add_argument("--tenant")
    scope.add_argument("--key")
    scope.add_argument("--object")
    erase.add_argument("--reason", required=True, help="why (kept with the erasure)")
    erase.add_argument(
        "--deadline",
        help="ISO 8601 with a time zone, or a number of days (default: 30 days from now)",
    )
    erase.add_argument(
        "--request-key",
        help="the same key twice is one erasure (a key starting with hint: is an urgent "
        "hint's own, refused here)",
    )
    erase.add_argument("--requested-by", help="who asks (default: the operating-system user)")
    erasures = commands.add_parser("erasures", help="list erasures, newest first")
    erasures.add_argument("--policy")
    erasures.add_argument("--limit", type=int, default=20)
    erasures.add_argument("--json", action="store_true", help="one JSON object per line")
    runs = commands.add_parser(
        "runs", help="the latest runs, their progress, and which holds the run lease"
    )
    runs.add_argument("--policy")
    runs.add_argument("--limit", type=int, default=10)
    runs.add_argument("--json", action="store_true", help="one JSON object per line")
    _holds_parser(commands)
    schema = commands.add_parser("schema", help="print the policies file's JSON Schema")
    schema.add_argument(
        "--write",
        action="store_true",
        help="rewrite include/retention_policies.schema.json, the field table of "
        "docs/policies.md and the list of DAG steps of docs/runs.md "
        "(with --sql: include/sql/schema.sql)",
    )
    schema.add_argument(
        "--sql",
        action="store_true",
        help="the retention schema's tables (columns, constraints, indexes), views and "
        "functions after every "
        "migration, from a scratch database on --dsn's server (created and dropped)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    load_local_env()  # before anything imports Airflow, which reads AIRFLOW_HOME at import
    args = _parser().parse_args(argv)
    if getattr(args, "sub_conn_id", None):
        args.conn_id = args.sub_conn_id
    if args.command == "schema" and args.sql:
        return _schema_sql(args)
    if args.command == "schema":
        return _schema(write=args.write)
    if args.command == "migrate":
        from retention.db.migrate import migrate

        with _connection(args) as conn:
            applied = migrate(conn)
        print(f"applied {', '.join(applied)}" if applied else "retention schema is up to date")
        return 0
    if args.command == "explain" and args.erasure is not None:
        return _explain_erasure(args)
    if args.command == "explain":
        if not args.term:
            print("explain needs a KEY|PREFIX|OBJECT_ID|ROW_KEY, or --erasure ID", file=sys.stderr)
            return 2
        return _explain(args)
    if args.command == "erase":
        return _erase(args)
    if args.command == "erasures":
        return _erasures(args)
    if args.command == "runs":
        return _runs(args)
    if args.command == "holds":
        return _holds(args)
    return _dead_letters(args)


def _holds_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    holds = commands.add_parser("holds", help="place, lift and list legal holds")
    actions = holds.add_subparsers(dest="holds_command", required=True)
    place = actions.add_parser(
        "place", help="keep a tenant, a row key or an object from deletion until lifted"
    )
    place.add_argument("--policy", help="only this policy (default: every policy)")
    match = place.add_mutually_exclusive_group(required=True)
    match.add_argument("--tenant")
    match.add_argument("--key", help="a row key (an integer)")
    match.add_argument("--object", help="an object id")
    place.add_argument("--reason", required=True, help="who asked and why (required)")
    place.add_argument("--by", help="who places it (default: the login name)")
    lift = actions.add_parser("lift", help="lift an active hold: what it kept may go again")
    lift.add_argument("hold_id", metavar="ID", type=int)
    lift.add_argument("--reason", required=True, help="why it is lifted (required)")
    lift.add_argument("--by", help="who lifts it (default: the login name)")
    listing = actions.add_parser("list", help="holds, newest first, active and lifted")
    listing.add_argument("--policy", help="this policy's and every-policy holds")
    listing.add_argument("--active", action="store_true", help="only active holds")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")


def _user(given: str | None) -> str:
    import getpass

    return (given or "").strip() or getpass.getuser()


def _policy_names() -> set[str]:
    """Every policy name in the policies file, valid or not (a typo is still a policy)."""
    from retention.policy.loader import load_policies

    loaded = load_policies()
    return {p.name for p in loaded.policies} | {problem.policy for problem in loaded.problems}


def _lift_conn_id(args: argparse.Namespace, hold_id: int) -> str | None:
    """The database holding active hold ``hold_id``: the one ``--dsn`` / ``--conn-id``
    names, else the only policy database where it is active (several: refused, name one)."""
    import psycopg

    from retention.holds.store import HoldError, get_hold

    targets = _every_conn_id(args)
    if len(targets) == 1:
        return targets[0]
    found = []
    for target in targets:
        try:
            with _connection(args, target) as conn:
                hold = get_hold(conn, hold_id)
        except psycopg.Error:  # a database not migrated to holds, or not answering
            continue
        if hold is not None and hold.active:
            found.append(target)
    if len(found) > 1:
        raise HoldError(
            f"hold {hold_id} is active in connections {', '.join(map(str, found))}; "
            "name one with --conn-id"
        )
    return found[0] if found else targets[0]


def _holds(args: argparse.Namespace) -> int:
    from retention.holds.store import (
        HoldError,
        HoldMatch,
        lift_hold,
        list_holds,
        place_hold,
        scope_value,
    )

    try:
        if args.holds_command == "place":
            match, value = next(
                (kind, given)
                for kind, given in (
                    (HoldMatch.TENANT, args.tenant),
                    (HoldMatch.KEY, args.key),
                    (HoldMatch.OBJECT, args.object),
                )
                if given is not None
            )
            known = _policy_names() if args.policy is not None else None
            targets = (
                [_policy_conn_id(args, args.policy)]
                if args.policy is not None
                else _every_conn_id(args)
            )
            policy = _loaded_policies().get(args.policy) if args.policy is not None else None
            placed: list[Any] = []
            for target in targets:
                with _connection(args, target) as conn:
                    placed.append(
                        place_hold(
                            conn,
                            policy=args.policy,
                            match=match,
                            value=value,
                            reason=args.reason,
                            placed_by=_user(args.by),
                            known_policies=known,
                            target=policy,
                        )
                    )
                    matching = (
                        scope_value(conn, policy, match, placed[-1].value)
                        if policy is not None
                        else None
                    )
                where = (
                    f" in connection {target} ({_policies_of(target)})" if len(targets) > 1 else ""
                )
                print(f"placed {placed[-1].described}{where}, by {placed[-1].placed_by}")
                if matching is not None and policy is not None:
                    print(f"  {matching.described(policy)}")
            # the id last (one per database when an every-policy hold spans several)
            for hold in placed:
                print(hold.hold_id)
            return 0
        if args.holds_command == "lift":
            target = _lift_conn_id(args, args.hold_id)
            with _connection(args, target) as conn:
                hold = lift_hold(conn, args.hold_id, reason=args.reason, lifted_by=_user(args.by))
            print(f"lifted {hold.described}, by {hold.lifted_by}: {hold.lift_reason}")
            return 0
    except (HoldError, WrongDatabase) as refused:
        print(f"nothing written: {refused}", file=sys.stderr)
        return 2
    explicit = args.dsn or args.conn_id or args.policy is None
    with _connection(args, None if explicit else _policy_conn_id(args, args.policy)) as conn:
        holds = list_holds(conn, args.policy, include_lifted=not args.active)
    return _listing(
        holds,
        as_json=args.json,
        json_of=lambda hold: hold.as_json(),
        empty="no holds" + (f" for policy {args.policy!r}" if args.policy else ""),
        line=_hold_line,
    )


def _hold_line(hold: Any) -> str:
    state = (
        "active"
        if hold.active
        else f"lifted {hold.lifted_at:%Y-%m-%d %H:%M} by {hold.lifted_by}: {hold.lift_reason}"
    )
    return (
        f"{hold.hold_id}  {hold.policy or '(every policy)'}  {hold.match}={hold.value}  "
        f"placed {hold.placed_at:%Y-%m-%d %H:%M} by {hold.placed_by}: {hold.reason}  "
        f"[{state}]"
    )


def _listing(
    rows: Sequence[Any],
    *,
    as_json: bool,
    empty: str,
    line: Callable[[Any], str],
    json_of: Callable[[Any], Any] = lambda row: row,
    footer: str | None = None,
) -> int:
    """What every listing command prints: one JSON object per line (``--json``), or
    ``empty`` when there is nothing, or one ``line`` per row and the ``footer``."""
    if as_json:
        for row in rows:
            print(json.dumps(json_of(row), default=str))
        return 0
    if not rows:
        print(empty)
        return 0
    for row in rows:
        print(line(row))
    if footer is not None:
        print(footer)
    return 0


def _schema(*, write: bool) -> int:
    from retention.paths import POLICIES_PAGE, POLICY_SCHEMA_PATH, RUNS_PAGE
    from retention.policy.schema import schema_text, with_field_table

    if not write:
        print(schema_text(), end="")
        return 0
    from retention.airflow.dag_docs import with_doc_steps  # imports Airflow: only to write

    POLICY_SCHEMA_PATH.write_text(schema_text())
    POLICIES_PAGE.write_text(with_field_table(POLICIES_PAGE.read_text()))
    RUNS_PAGE.write_text(with_doc_steps(RUNS_PAGE.read_text()))
    print(f"wrote {POLICY_SCHEMA_PATH.name}, the field table and the DAG steps in docs/")
    return 0


def _schema_sql(args: argparse.Namespace) -> int:
    from retention.db.schema_snapshot import SNAPSHOT_PATH, snapshot_of_fresh_schema

    if not args.dsn:
        print(
            "schema --sql needs --dsn: a server where it may create a scratch database",
            file=sys.stderr,
        )
        return 2
    text = snapshot_of_fresh_schema(args.dsn)
    if not args.write:
        print(text, end="")
        return 0
    SNAPSHOT_PATH.write_text(text)
    print(f"wrote include/sql/{SNAPSHOT_PATH.name}")
    return 0


def _all_policies() -> dict[str, Policy]:
    """Every policy by name: for explain, the remote ones' row rule (their resources) and
    local side (their children), and the others' row keys. Empty when the policies file
    cannot be read here (explain then takes an object's operations as all, shows no
    tables, and answers a row key with the holds on it alone)."""
    from retention.policy.loader import load_policies

    try:
        loaded = load_policies()
    except Exception:  # explain still answers from the ledger alone
        return {}
    return {p.name: p for p in loaded.policies}


def _explain(args: argparse.Namespace) -> int:
    from retention.evidence.explain import UnknownOperation, explain, render
    from retention.evidence.lookup import MAX_MATCHES, find_operations, is_operation_key

    every = _all_policies()
    policies = {name: p for name, p in every.items() if p.remote}
    rows_only = every.get(args.policy) if args.policy not in policies else None
    resources_of = {name: p.remote.resources for name, p in policies.items() if p.remote}
    term = args.term.strip()
    where = f" of policy {args.policy!r}" if args.policy else ""
    try:  # a row policy's rows are read where its deletes look: its own connection
        target = _policy_conn_id(args, args.policy) if rows_only is not None else None
    except WrongDatabase as wrong:
        print(f"explain: {wrong}", file=sys.stderr)
        return 2
    with _connection(args, target) as conn:
        if is_operation_key(term) and not args.policy:
            try:
                record = explain(conn, term, resources_of, policies)
            except UnknownOperation:
                record = None
            if record is not None:
                print(json.dumps(record, indent=2) if args.json else render(record))
                return 0
        try:
            matches = find_operations(conn, term, policy=args.policy, limit=MAX_MATCHES + 1)
        except ValueError as empty:
            print(empty, file=sys.stderr)
            return 2
        if len(matches) == 1:
            record = explain(conn, matches[0]["operation_key"], resources_of, policies)
            print(json.dumps(record, indent=2) if args.json else render(record))
            return 0
        if not matches and rows_only is not None:
            return _explain_row(conn, rows_only, term, as_json=args.json)
        if not matches and (held := _holds_on(conn, term, args.policy)):
            # a row of a row policy has no operation: the holds keeping it are its record
            for hold in held:
                print(json.dumps(hold.as_json()) if args.json else f"held by {hold.described}")
            return 0
    if not matches:
        print(
            f"no operation{where} matches {term!r} as an operation key, a key prefix "
            "(4 or more hex digits), an object id or a row key",
            file=sys.stderr,
        )
        return 1
    shown = matches[:MAX_MATCHES]
    if args.json:
        for row in shown:
            print(json.dumps(row, default=str))
    else:
        for row in shown:
            print(
                f"{row['operation_key']}  {row['policy']}  object={row['object_id']} "
                + ("" if row["resource"] == "object" else f"resource={row['resource']} ")
                + f"row={row['row_key']}  {row['state']}"
                + (f" ({row['failure_class']})" if row["failure_class"] else "")
                + f"  updated {row['updated_at']:%Y-%m-%d %H:%M}"
            )
    more = "; showing the newest 20" if len(matches) > MAX_MATCHES else ""
    print(
        f"{len(shown)}{'+' if more else ''} operations{where} match {term!r}{more}: "
        "explain one by its key (or narrow with --policy or a longer prefix)",
        file=sys.stderr,
    )
    return 0


def _explain_row(conn: Connection, policy: Policy, term: str, *, as_json: bool) -> int:
    """A row key of a policy without ``remote:`` (no operation names its rows): the
    row's record (whether it is there, its tables, the holds keeping it: those matching
    the row, its key's and its tenant's; the other holds whose value is the term are
    listed apart as not keeping it). A term that is no row key prints the holds whose
    value it is (a tenant's), as it always has, or an error naming the key column and
    its type."""
    from retention.evidence.explain import NotARowKey, explain_row, render_row, row_key_of

    named = _holds_on(conn, term, policy.name)
    try:
        row_key = row_key_of(conn, policy, term)
    except NotARowKey as wrong:
        if not named:
            print(f"explain: {wrong}", file=sys.stderr)
            return 2
        for hold in named:
            print(json.dumps(hold.as_json()) if as_json else f"held by {hold.described}")
        return 0
    record = explain_row(conn, policy, row_key, named)
    print(json.dumps(record, indent=2) if as_json else render_row(record))
    return 0


def _holds_on(conn: Connection, term: str, policy: str | None) -> list[Any]:
    """The active holds (of ``policy`` and every policy) whose tenant, key or object is
    ``term``: what keeps a row that no operation names."""
    from retention.holds.store import list_holds

    return [h for h in list_holds(conn, policy, include_lifted=False) if h.value == term]


def _deadline(text: str | None) -> dt.datetime | None:
    """``--deadline``: a number of days from now, or an ISO 8601 moment."""
    if text is None:
        return None
    if text.strip().isdigit():
        return dt.datetime.now(dt.UTC) + dt.timedelta(days=int(text))
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError as bad:
        raise ValueError(
            f"erase: --deadline {text!r} is neither a number of days nor an ISO 8601 time "
            "such as 2026-12-31T00:00:00+00:00. Nothing was written."
        ) from bad


def _erase(args: argparse.Namespace) -> int:
    import getpass

    from retention.erasures.request import ErasureRejected, request_erasure, validate
    from retention.holds.store import MATCH_COUNT_LIMIT
    from retention.policy import load_policies

    scope, value = next(
        (name, getattr(args, name))
        for name in ("tenant", "key", "object")
        if getattr(args, name) is not None
    )
    try:
        asked = validate(
            {p.name: p for p in load_policies().policies},
            policy=args.policy,
            scope=scope,
            value=value,
            reason=args.reason,
            requested_by=args.requested_by or f"cli:{getpass.getuser()}",
            deadline=_deadline(args.deadline),
            request_key=args.request_key,
        )
        target = _policy_conn_id(args, args.policy)
    except (ErasureRejected, ValueError) as refused:
        print(refused, file=sys.stderr)
        return 2
    except WrongDatabase as refused:
        print(f"erase: {refused}. Nothing was written.", file=sys.stderr)
        return 2
    try:
        with _connection(args, target) as conn:
            erasure, created = request_erasure(conn, asked)
    except ErasureRejected as conflict:  # the request key names another request
        print(conflict, file=sys.stderr)
        return 2
    print(
        ("requested" if created else "already requested (the same request key)")
        + f": erasure of {erasure['scope']} {erasure['value']!r} in policy {erasure['policy']!r}, "
        f"{erasure['state']}, due by {erasure['deadline']:%Y-%m-%d %H:%M %Z}; the "
        "retention__erasure-requests DAG works it within a minute"
    )
    if erasure["rows_matching"] is not None:
        more = " or more" if erasure["rows_matching"] >= MATCH_COUNT_LIMIT else ""
        print(f"  {erasure['rows_matching']}{more} row(s) of {asked.policy.table} in it now")
    print(erasure["erasure_id"])
    return 0


def _passes(row: dict[str, Any]) -> str:
    """An erasure's pass count as shown: an erasure recorded before passes were counted
    (migration 0022) says so rather than showing a count it does not have."""
    passes = row.get("passes")
    return "not counted" if passes is None else str(passes)


def _erasure_line(row: dict[str, Any]) -> str:
    counts = ", ".join(f"{table} {n}" for table, n in (row["rows_deleted"] or {}).items())
    return (
        f"{row['erasure_id']}  {row['policy']}  {row['scope']}={row['value']}  {row['state']}"
        + ("  LATE" if row.get("late") else "")
        + f"  due {row['deadline']:%Y-%m-%d %H:%M}"
        + f"  passes: {_passes(row)}"
        + (f"  rows: {counts}" if counts else "")
        + (f"  objects: {len(row['objects'])}" if row["objects"] else "")
        + (
            "  held by " + ", ".join(f"{h['id']} ({h['reason']})" for h in row["blocking_holds"])
            if row["blocking_holds"]
            else ""
        )
    )


def _explain_erasure(args: argparse.Namespace) -> int:
    from retention.erasures.request import get_erasure

    with _connection(args) as conn:
        row = get_erasure(conn, args.erasure)
    if row is None:
        print(f"no erasure {args.erasure}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(row, default=str, indent=2))
        return 0
    holds = row["blocking_holds"] or []
    finished = row["finished_at"]
    lines = [
        f"erasure {row['erasure_id']} of policy {row['policy']!r}: {row['scope']} {row['value']!r}",
        f"  state: {row['state']}"
        + (f" (finished {finished:%Y-%m-%d %H:%M:%S %Z})" if finished else ""),
        f"  deadline: {row['deadline']:%Y-%m-%d %H:%M %Z}",
        f"  passes: {_passes(row)}",
        f"  reason: {row['reason']}",
        f"  requested by {row['requested_by']} at {row['requested_at']:%Y-%m-%d %H:%M:%S %Z} "
        f"(request key {row['request_key']})",
        f"  rows deleted: {json.dumps(row['rows_deleted'])}",
        f"  objects deleted: {len(row['objects'])}"
        + (f" ({', '.join(row['objects'][:20])})" if row["objects"] else ""),
        "  blocking holds: "
        + (", ".join(f"{h['id']} ({h['reason']})" for h in holds) if holds else "none"),
    ]
    if row["error"]:
        lines.append(f"  error: {row['error']}")
    print("\n".join(lines))
    return 0


def _erasures(args: argparse.Namespace) -> int:
    from retention.erasures.request import list_erasures

    with _connection(args) as conn:
        rows = list_erasures(conn, policy=args.policy, limit=args.limit)
    return _listing(
        rows,
        as_json=args.json,
        empty="no erasures" + (f" of policy {args.policy!r}" if args.policy else ""),
        line=_erasure_line,
    )


def _failure_classes(conn: Connection, policy: str | None) -> str:
    from retention.evidence.lookup import dead_failure_classes

    classes = dead_failure_classes(conn, policy=policy)
    if not classes:
        return "no dead operations" + (f" of policy {policy!r}" if policy else "")
    lines = [f"  {row['failure_class'] or '(none)'}: {row['operations']}" for row in classes]
    return "failure classes of dead operations (count):\n" + "\n".join(lines)


def _dead_letters(args: argparse.Namespace) -> int:
    from retention.evidence.replay import dead_operations

    with _connection(args) as conn:
        if args.failure_class == "":
            print(_failure_classes(conn, args.policy))
            return 0
        rows = dead_operations(
            conn, policy=args.policy, failure_class=args.failure_class, limit=args.limit
        )
        if not rows and args.failure_class:
            print(
                f"no dead operations of failure class {args.failure_class!r}; "
                + _failure_classes(conn, args.policy),
                file=sys.stderr,
            )
            return 1
    return _listing(
        rows,
        as_json=args.json,
        empty="no dead operations",
        line=_dead_letter_line,
        footer=f"{len(rows)} dead operation(s); replay with the retention__replay DAG",
    )


def _dead_letter_line(row: dict[str, Any]) -> str:
    from retention.evidence.explain import answer

    return (
        f"{row['operation_key']}  {row['policy']}  object={row['object_id']} "
        + ("" if row["resource"] == "object" else f"resource={row['resource']} ")
        + f"tenant={row['tenant']}  {row['failure_class']} "
        f"({answer(row['last_status_code'])}) "
        f"after {row['attempt_count']} attempts, "
        f"dead since {row['dead_since']:%Y-%m-%d %H:%M}: {row['reason']}"
    )


def _runs(args: argparse.Namespace) -> int:
    from retention.evidence.lookup import recent_runs

    with _connection(args) as conn:
        rows = recent_runs(conn, policy=args.policy, limit=args.limit)
    return _listing(
        rows,
        as_json=args.json,
        empty="no runs recorded" + (f" for policy {args.policy!r}" if args.policy else ""),
        line=_run_line,
        json_of=_run_json,
    )


def _run_json(row: dict[str, Any]) -> dict[str, Any]:
    """A run as ``runs --json`` prints it: its columns, and the two notes of its summary."""
    summary = row["summary"]
    return {
        **{column: value for column, value in row.items() if column != "summary"},
        "covered_note": summary.covered_note if summary else None,
        "rate_limit_headers_note": summary.rate_limit_headers_note if summary else None,
    }


def _run_line(row: dict[str, Any]) -> str:
    summary = row["summary"]  # a RunSummary, read typed (None until reconcile or a stop)
    covered = summary.covered_note if summary else None
    headers = summary.rate_limit_headers_note if summary else None
    windows = " ".join(f"{state} {n}" for state, n in sorted(row["windows_by_state"].items()))
    so_far = row["rows_deleted"] is None  # not reconciled yet: what its windows did
    deleted = row["rows_deleted_so_far"] if so_far else row["rows_deleted"]
    return (
        f"{row['policy']}  {row['run_id']}  {row['status']}"
        + (" (dry run)" if row["dry_run"] else "")
        + f"  cutoff {row['cutoff']:%Y-%m-%d %H:%M}  deleted {deleted:,}"
        + (" so far" if so_far else "")
        + ("" if row["rows_remaining"] is None else f", {row['rows_remaining']:,} remaining")
        + f"  windows: {windows or 'none'}"
        + ("  [holds the run lease]" if row["lease_holder"] == row["run_id"] else "")
        + (f"  ({covered})" if covered else "")
        + (f"  ({headers})" if headers else "")
    )


if __name__ == "__main__":
    sys.exit(main())
