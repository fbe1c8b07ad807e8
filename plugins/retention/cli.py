"""Command line: ``python -m retention.cli dead-letters | explain KEY``.

Run with ``plugins/`` on ``PYTHONPATH``.

Connects through an Airflow connection id (``--conn-id``, resolved like a task
would, e.g. from ``AIRFLOW_CONN_<ID>``) or a libpq DSN (``--dsn``).
"""

from __future__ import annotations

import argparse
import json
import sys

from retention.db import Connection, connect, connect_dsn
from retention.explain import UnknownOperation, explain, render
from retention.replay import dead_operations


def _connection(args: argparse.Namespace) -> Connection:
    if args.dsn:
        return connect_dsn(args.dsn)
    return connect(args.conn_id)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retention.cli", description=__doc__)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--conn-id", default="retention_target", help="Airflow connection id")
    where.add_argument("--dsn", help="libpq connection string instead of a connection id")
    commands = parser.add_subparsers(dest="command", required=True)
    dead = commands.add_parser("dead-letters", help="list dead operations awaiting review")
    dead.add_argument("--policy")
    dead.add_argument("--failure-class")
    dead.add_argument("--limit", type=int, default=100)
    dead.add_argument("--json", action="store_true", help="one JSON object per line")
    explain_cmd = commands.add_parser("explain", help="the evidence record of one operation")
    explain_cmd.add_argument("operation_key")
    explain_cmd.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    if args.command == "explain":
        with _connection(args) as conn:
            try:
                record = explain(conn, args.operation_key)
            except UnknownOperation as missing:
                print(missing, file=sys.stderr)
                return 1
        print(json.dumps(record, indent=2) if args.json else render(record))
        return 0
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
