"""Command line: ``python -m retention.cli COMMAND`` (with ``plugins/`` on ``PYTHONPATH``).

- ``migrate``: apply the ``retention`` schema's migrations (for a deploy pipeline;
  every policy DAG also runs them first, in ``migrate_schema``);
- ``dead-letters``: list dead operations awaiting review;
- ``explain KEY``: the evidence record of one operation;
- ``schema``: print the policies file's JSON Schema (``--write`` refreshes the
  checked-in copy and the README's field table).

Database commands connect through an Airflow connection id (``--conn-id``,
resolved as a task would, e.g. from ``AIRFLOW_CONN_<ID>``) or a libpq DSN (``--dsn``).
"""

from __future__ import annotations

import argparse
import json
import sys

from retention.db.connection import Connection, connect_dsn


def _connection(args: argparse.Namespace) -> Connection:
    if args.dsn:
        return connect_dsn(args.dsn)
    from retention.airflow.connections import postgres

    return postgres(args.conn_id)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m retention.cli", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--conn-id", default="retention_target", help="Airflow connection id")
    where.add_argument("--dsn", help="libpq connection string instead of a connection id")
    commands = parser.add_subparsers(dest="command", required=True)
    migrate = commands.add_parser("migrate", help="apply the retention schema's migrations")
    migrate.add_argument("--conn-id", dest="sub_conn_id", help="Airflow connection id")
    dead = commands.add_parser("dead-letters", help="list dead operations awaiting review")
    dead.add_argument("--policy")
    dead.add_argument("--failure-class")
    dead.add_argument("--limit", type=int, default=100)
    dead.add_argument("--json", action="store_true", help="one JSON object per line")
    explain_cmd = commands.add_parser("explain", help="the evidence record of one operation")
    explain_cmd.add_argument("operation_key")
    explain_cmd.add_argument("--json", action="store_true")
    schema = commands.add_parser("schema", help="print the policies file's JSON Schema")
    schema.add_argument(
        "--write",
        action="store_true",
        help="rewrite include/retention_policies.schema.json and the README's field table",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "sub_conn_id", None):
        args.conn_id = args.sub_conn_id
    if args.command == "schema":
        return _schema(write=args.write)
    if args.command == "migrate":
        from retention.db.migrate import migrate

        with _connection(args) as conn:
            applied = migrate(conn)
        print(f"applied {', '.join(applied)}" if applied else "retention schema is up to date")
        return 0
    if args.command == "explain":
        from retention.evidence.explain import UnknownOperation, explain, render

        with _connection(args) as conn:
            try:
                record = explain(conn, args.operation_key)
            except UnknownOperation as missing:
                print(missing, file=sys.stderr)
                return 1
        print(json.dumps(record, indent=2) if args.json else render(record))
        return 0
    return _dead_letters(args)


def _schema(*, write: bool) -> int:
    from retention.paths import POLICY_SCHEMA_PATH, PROJECT_ROOT
    from retention.policy.schema import readme_with_table, schema_text

    if not write:
        print(schema_text(), end="")
        return 0
    POLICY_SCHEMA_PATH.write_text(schema_text())
    readme = PROJECT_ROOT / "README.md"
    readme.write_text(readme_with_table(readme.read_text()))
    print(f"wrote {POLICY_SCHEMA_PATH.name} and the README's field table")
    return 0


def _dead_letters(args: argparse.Namespace) -> int:
    from retention.evidence.replay import dead_operations

    with _connection(args) as conn:
        rows = dead_operations(
            conn, policy=args.policy, failure_class=args.failure_class, limit=args.limit
        )
    if args.json:
        for row in rows:
            print(json.dumps(row, default=str))
        return 0
    if not rows:
        print("no dead operations")
        return 0
    for row in rows:
        print(
            f"{row['operation_key']}  {row['policy']}  object={row['object_id']} "
            f"tenant={row['tenant']}  {row['failure_class']} (HTTP {row['last_status_code']}) "
            f"after {row['attempt_count']} attempts, "
            f"dead since {row['dead_since']:%Y-%m-%d %H:%M}: {row['reason']}"
        )
    print(f"{len(rows)} dead operation(s); replay with the retention__replay DAG")
    return 0


if __name__ == "__main__":
    sys.exit(main())
