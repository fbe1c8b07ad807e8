"""Plan a run: split the eligible key space into immutable windows and record them.

Eligible rows are found by walking the key index in steps of ``window_rows``
(keyset pagination), one short read-only statement per window, so planning
never runs a ``count(*)`` over the whole table.  The plan is recorded once per
(policy, run id); a retried planner returns the recorded plan unchanged, which
is what makes the mapped deletes safe to retry.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query
from retention.policy.model import Policy, TableSpec, Timeouts
from retention.rows.target import TargetTable, TenantScope
from retention.rows.windows import Window, fit_to_map_limit

log = logging.getLogger(__name__)

MIN_KEY = -(2**63)
INTEGER_TYPES = {"smallint", "integer", "bigint"}
TIMESTAMP_TYPES = {"timestamp with time zone", "timestamp without time zone", "date"}


class PlanError(RuntimeError):
    """The policy does not match the live table, or the plan cannot be made."""


@dataclass(frozen=True)
class PlanRequest:
    """Everything a plan depends on; all of it comes from the run, none from 'now'."""

    policy: Policy
    run_id: str
    plan_id: str
    cutoff: dt.datetime
    anchor_source: str
    logical_date: dt.datetime | None
    window_rows: int
    batch_rows: int
    max_windows: int
    dry_run: bool


def plan_id_for(run_id: str, *moments: dt.datetime | None) -> str:
    """Identify one lifetime of a DAG run: task retries share it, a re-created run does not.

    ``moments`` are the DAG run's ``run_after`` and ``start_date``: both survive
    task retries, and at least one differs when a run is deleted and created
    again under the same run id (``airflow dags test`` twice, or the UI).
    """
    stamp = "|".join(m.astimezone(dt.UTC).isoformat() if m else "-" for m in moments)
    return f"{run_id}@{hashlib.sha256(stamp.encode()).hexdigest()[:12]}"


def load_plan(conn: Connection, policy: str, run_id: str) -> tuple[str, list[Window]] | None:
    """The latest recorded plan of a run (its plan_id and windows), or None."""
    run = conn.execute(query("run_for_id"), {"policy": policy, "run_id": run_id}).fetchone()
    if run is None:
        return None
    rows = conn.execute(query("windows_for_plan"), {"policy": policy, "plan_id": run["plan_id"]})
    return run["plan_id"], [window_from_row(row) for row in rows]


def window_from_row(row: dict[str, Any]) -> Window:
    return Window(
        policy=row["policy"],
        run_id=row["run_id"],
        plan_id=row["plan_id"],
        window_no=row["window_no"],
        tenant_scope=row["tenant_scope"],
        tenant=row["tenant"],
        cutoff=row["cutoff"],
        first_id=row["first_id"],
        last_id=row["last_id"],
        expected_rows=row["expected_rows"],
    )


def check_table(conn: Connection, policy_name: str, table: TableSpec) -> None:
    """Fail with a message naming the policy and field when the table does not fit it."""
    where = {"schema": table.schema, "table": table.name}
    if not conn.execute(query("table_exists"), where).fetchone()["present"]:  # type: ignore[index]
        raise PlanError(
            f"policy {policy_name!r}, field 'table': table {table} does not exist "
            "in the database of the policy's postgres_conn_id"
        )
    wanted = {
        "key_column": table.key_column,
        "timestamp_column": table.timestamp_column,
    }
    if table.tenant_column:
        wanted["tenant_column"] = table.tenant_column
    rows = conn.execute(query("table_columns"), {**where, "columns": list(wanted.values())})
    types = {row["column_name"]: row["column_type"] for row in rows}
    for field_name, column in wanted.items():
        if column not in types:
            raise PlanError(
                f"policy {policy_name!r}, field {field_name!r}: column {column!r} "
                f"does not exist in {table}"
            )
    if types[table.key_column] not in INTEGER_TYPES:
        raise PlanError(
            f"policy {policy_name!r}, field 'key_column': {table.key_column!r} is "
            f"{types[table.key_column]}; windows need an integer key"
        )
    if types[table.timestamp_column] not in TIMESTAMP_TYPES:
        raise PlanError(
            f"policy {policy_name!r}, field 'timestamp_column': {table.timestamp_column!r} "
            f"is {types[table.timestamp_column]}; expected a timestamp"
        )


def tenant_groups(
    conn: Connection, policy: Policy, target: TargetTable, cutoff: dt.datetime, max_windows: int
) -> list[tuple[TenantScope, Any]]:
    """The tenant scopes to plan: one per tenant (plus NULL), or all at once if too many."""
    if target.tenant is None or not policy.window_per_tenant:
        return [("all", None)]
    with bounded(conn, policy.timeouts, reads=True, timezone=policy.timestamp_timezone):
        tenants = [
            row["tenant"]
            for row in conn.execute(target.query("list_tenants"), {"max_tenants": max_windows})
        ]
        has_null = conn.execute(target.query("null_tenant_eligible"), {"cutoff": cutoff}).fetchone()
    groups: list[tuple[TenantScope, Any]] = [("one", tenant) for tenant in tenants]
    if has_null and has_null["present"]:
        groups.append(("null", None))
    if len(groups) > max_windows:
        log.warning(
            "policy %s: more than %d tenants; planning windows across all tenants "
            "(raise [core] max_map_length to keep one window group per tenant)",
            policy.name,
            max_windows,
        )
        return [("all", None)]
    return groups


def walk_group(
    conn: Connection,
    request: PlanRequest,
    target: TargetTable,
    scope: TenantScope,
    tenant: Any,
    first_window_no: int,
) -> list[Window]:
    """Keyset-walk one tenant scope into windows of up to ``window_rows`` eligible rows."""
    policy = request.policy
    timeouts: Timeouts = policy.timeouts
    statement = target.query("plan_next_window", scope)
    windows: list[Window] = []
    after = MIN_KEY
    while True:
        params = {
            "after": after,
            "cutoff": request.cutoff,
            "window_rows": request.window_rows,
            "tenant": tenant,
        }
        with bounded(conn, timeouts, reads=True, timezone=policy.timestamp_timezone):
            row = conn.execute(statement, params).fetchone()
        if row is None or not row["expected_rows"]:
            return windows
        windows.append(
            Window(
                policy=policy.name,
                run_id=request.run_id,
                plan_id=request.plan_id,
                window_no=first_window_no + len(windows),
                tenant_scope=scope,
                tenant=None if tenant is None else str(tenant),
                cutoff=request.cutoff,
                first_id=row["first_id"],
                last_id=row["last_id"],
                expected_rows=row["expected_rows"],
            )
        )
        if row["expected_rows"] < request.window_rows:
            return windows
        after = row["last_id"]


def plan_windows(conn: Connection, request: PlanRequest) -> list[Window]:
    """Return the run's windows, planning and recording them on first call."""
    policy = request.policy
    recorded = load_plan(conn, policy.name, request.run_id)
    if recorded is not None and recorded[0] == request.plan_id:
        log.info(
            "policy %s run %s: reusing the recorded plan %s of %d windows",
            policy.name,
            request.run_id,
            request.plan_id,
            len(recorded[1]),
        )
        return recorded[1]
    if recorded is not None:
        log.info(
            "policy %s run %s was planned before as %s; this DAG run plans afresh as %s",
            policy.name,
            request.run_id,
            recorded[0],
            request.plan_id,
        )
    started = time.perf_counter()
    check_table(conn, policy.name, policy.table_spec)
    target = TargetTable.of(policy.table_spec)
    windows: list[Window] = []
    for scope, tenant in tenant_groups(conn, policy, target, request.cutoff, request.max_windows):
        windows += walk_group(conn, request, target, scope, tenant, len(windows))
    planned = len(windows)
    windows = fit_to_map_limit(windows, request.max_windows)
    if len(windows) < planned:
        log.info(
            "policy %s: widened %d windows to %d to stay within max_map_length %d",
            policy.name,
            planned,
            len(windows),
            request.max_windows,
        )
    record_plan(conn, request, windows, time.perf_counter() - started)
    recorded = load_plan(conn, policy.name, request.run_id)
    return recorded[1] if recorded else []


def record_plan(
    conn: Connection, request: PlanRequest, windows: list[Window], plan_seconds: float
) -> None:
    """Insert the run row and its windows in one transaction (first planner wins)."""
    policy = request.policy
    with conn.transaction():
        conn.execute(
            query("run_record_plan"),
            {
                "policy": policy.name,
                "run_id": request.run_id,
                "plan_id": request.plan_id,
                "dag_id": policy.dag_id,
                "table_name": str(policy.table),
                "logical_date": request.logical_date,
                "anchor_source": request.anchor_source,
                "cutoff": request.cutoff,
                "dry_run": request.dry_run,
                "window_rows": request.window_rows,
                "batch_rows": request.batch_rows,
                "windows": len(windows),
                "rows_planned": sum(w.expected_rows for w in windows),
                "plan_seconds": plan_seconds,
            },
        )
        with conn.cursor() as cur:
            cur.executemany(
                query("windows_insert"),
                [{**w.to_xcom(), "cutoff": w.cutoff} for w in windows],
            )
