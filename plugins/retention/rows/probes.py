"""Find a scope's eligible key range with a few index probes, never a walk of the rows.

The first eligible key comes from one walk up the key index that stops at the
first old row.  The last one comes from the timestamp index: the largest key
among the newest eligible rows, then a bounded look past it for rows whose
keys are out of time order (late commits, back-filled rows).  If that look
keeps finding eligible rows, keys do not follow time and the range runs to the
scope's last key.  Without an index on the timestamp the range always runs to
the last key, and the plan says so.

The number of eligible rows is the planner's estimate from the table's
statistics (``EXPLAIN``), never a count: the delete filters on the timestamp,
so the estimate only sizes windows.  An eligible row with a key beyond the
range (inserted out of order further than the probes look) is not deleted by
this run: reconcile reports it as a row outside the windows, which makes the
run dirty, and the next run plans the whole key range to reach it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query
from retention.policy.model import Policy, TableSpec
from retention.rows.target import TargetTable, TenantScope

MAX_KEY = 2**63 - 1
NEWEST_SAMPLE_ROWS = 1_000
TAIL_PROBE_ROWS = 10_000
MAX_TAIL_PROBES = 4


@dataclass(frozen=True)
class KeyRange:
    """The eligible key range of one tenant scope, as the probes found it."""

    scope: TenantScope
    tenant: Any
    first_id: int
    last_id: int
    estimated_rows: int
    note: str | None = None  # why the range runs further than the newest eligible key


@dataclass(frozen=True)
class TableIndexes:
    """Which columns of the table lead an index (the probes need them to stay short)."""

    key: bool
    timestamp: bool

    @classmethod
    def read(cls, conn: Connection, table: TableSpec) -> TableIndexes:
        def leads(column: str) -> bool:
            row = conn.execute(
                query("plan_leading_index"),
                {"schema": table.schema, "table": table.name, "column": column},
            ).fetchone()
            return bool(row and row["present"])

        return cls(key=leads(table.key_column), timestamp=leads(table.timestamp_column))


def key_histogram(conn: Connection, table: TableSpec) -> list[int]:
    """The key column's histogram bounds from the last ANALYZE, or [] if there are none."""
    row = conn.execute(
        query("plan_key_histogram"),
        {"schema": table.schema, "table": table.name, "column": table.key_column},
    ).fetchone()
    return list(row["bounds"]) if row and row["bounds"] else []


@dataclass(frozen=True)
class RangeProbe:
    """Probes one policy's table; every statement is bounded by the plan timeouts."""

    conn: Connection
    policy: Policy
    target: TargetTable
    indexes: TableIndexes
    cutoff: dt.datetime
    whole_range_reason: str | None = None  # set: every scope's range runs to its last key

    def _one(self, name: str, scope: TenantScope, tenant: Any, **params: Any) -> dict[str, Any]:
        policy = self.policy
        with bounded(self.conn, policy.timeouts, reads=True, timezone=policy.timestamp_timezone):
            row = self.conn.execute(
                self.target.query(name, scope),
                {"cutoff": self.cutoff, "tenant": tenant, **params},
            ).fetchone()
        return row or {}

    def eligible_range(self, scope: TenantScope, tenant: Any) -> KeyRange | None:
        """The scope's eligible key range, or None when no row is older than the cutoff."""
        first = self._one("plan_first_eligible", scope, tenant, upto=MAX_KEY).get("k")
        if first is None:
            return None
        last, note = self._last_eligible(scope, tenant, first)
        estimate = self.estimate(scope, tenant)
        return KeyRange(scope, tenant, first, last, max(estimate, 1), note)

    def within(self, whole: KeyRange, scope: TenantScope, tenant: Any) -> KeyRange | None:
        """One tenant's eligible range, clipped to the table's (``whole``): two probes of
        the (tenant, key) index, so per-tenant planning never walks a tenant's rows by
        the timestamp index. None when the tenant has no row older than the cutoff."""
        first = self._one("plan_first_eligible", scope, tenant, upto=whole.last_id).get("k")
        if first is None:
            return None
        last = self._one("plan_last_key", scope, tenant, upto=whole.last_id)["k"]
        estimate = self.estimate(scope, tenant)
        return KeyRange(scope, tenant, int(first), int(last), max(estimate, 1), whole.note)

    def _last_eligible(self, scope: TenantScope, tenant: Any, first: int) -> tuple[int, str | None]:
        column = self.policy.table_spec.timestamp_column
        last_key = int(self._one("plan_last_key", scope, tenant, upto=MAX_KEY)["k"])
        if self.whole_range_reason:
            return (
                last_key,
                f"{self.whole_range_reason}: windows cover the key range up to {last_key}",
            )
        if not self.indexes.timestamp:
            return last_key, (
                f"no index on {column}: windows cover the whole key range up to {last_key}"
            )
        newest = self._one(
            "plan_newest_eligible", scope, tenant, sample_rows=NEWEST_SAMPLE_ROWS
        ).get("k")
        last = max(first, int(newest if newest is not None else first))
        after = last
        for _ in range(MAX_TAIL_PROBES):
            probe = self._one(
                "plan_tail_probe", scope, tenant, after=after, probe_rows=TAIL_PROBE_ROWS
            )
            if not probe.get("keys"):
                return last, None  # the end of the table
            if probe["last_eligible"] is None:
                return last, None  # a clean stretch of younger rows: the range ends here
            last = int(probe["last_eligible"])
            if probe["keys"] < TAIL_PROBE_ROWS:
                return last, None
            after = int(probe["last_key"])
        return last_key, (
            f"keys of {self.policy.table_spec} do not follow {column}: eligible rows "
            f"were still found {MAX_TAIL_PROBES * TAIL_PROBE_ROWS:,} keys past the newest "
            f"eligible row, so windows cover the key range up to {last_key}"
        )

    def estimate(self, scope: TenantScope, tenant: Any) -> int:
        """The statistics' estimate of the scope's eligible rows (EXPLAIN, no read)."""
        plan = self._one("plan_estimate", scope, tenant)
        explained = plan.get("QUERY PLAN") or [{}]
        return int(explained[0].get("Plan", {}).get("Plan Rows", 0))

    def snap(self, scope: TenantScope, tenant: Any, at: int, upto: int) -> int | None:
        """The first key of the scope in [at, upto], or None if that stretch is empty."""
        key = self._one("plan_snap_key", scope, tenant, at=at, upto=upto).get("k")
        return None if key is None else int(key)
