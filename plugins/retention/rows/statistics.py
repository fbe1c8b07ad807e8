"""Fresh statistics after a large delete: ANALYZE the table, as pt-archiver's ``--analyze``.

The planner sizes its windows, and a dry run its estimate, from the table's statistics.
Right after a run that deleted a large share of the table, they still count the deleted
rows until autovacuum's next analyze (a dry run just after the demo planned about
666,000 rows and counted 2,437). So reconcile, once the run's deletions are final,
runs ``ANALYZE`` when the run deleted more than a tenth of the rows the statistics
count (``pg_class.reltuples``, before the next analyze sees the deletions), and logs
it; the policy's ``analyze_after: false`` leaves it to autovacuum.

Stale statistics cost estimates, never correctness: an ANALYZE that cannot run (a lock
wait past ``lock_timeout_ms``, a role that does not own the table) is logged, and the
run's result stands.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.errors import Diagnostic

from retention.db.connection import Connection, bounded
from retention.db.sqlfiles import query
from retention.policy.model import TableSpec, Timeouts
from retention.progress import duration

log = logging.getLogger(__name__)

ANALYZE_SHARE = 0.1  # deleted more than this share of the estimated rows: analyze


def stale_statistics(rows_deleted: int, estimated_rows: float | None) -> str | None:
    """Why a run that deleted ``rows_deleted`` rows left the statistics stale, or None
    (pure): more than :data:`ANALYZE_SHARE` of what they count, or any rows when they
    count none yet."""
    if rows_deleted <= 0:
        return None
    if estimated_rows is None:
        return f"the run deleted {rows_deleted:,} rows and the table has no statistics yet"
    if rows_deleted > ANALYZE_SHARE * estimated_rows:
        return (
            f"the run deleted {rows_deleted:,} rows, more than a tenth of the "
            f"~{round(estimated_rows):,} its statistics count"
        )
    return None


@dataclass(frozen=True)
class StatisticsRefresh:
    """What the refresh did: whether the table was analyzed, and the sentence logged."""

    analyzed: bool
    said: str


def refresh_statistics(
    conn: Connection,
    table: TableSpec,
    timeouts: Timeouts,
    rows_deleted: int,
    *,
    enabled: bool = True,
    who: str = "",
) -> StatisticsRefresh | None:
    """ANALYZE ``table`` when the run's ``rows_deleted`` made its statistics stale, and log
    it (None when they are not stale). ``enabled`` False (the policy's ``analyze_after``)
    logs that it was left to autovacuum instead."""
    where = {"schema": table.schema, "table": table.name}
    row = conn.execute(query("target_statistics"), where).fetchone()
    reason = stale_statistics(rows_deleted, row["estimated_rows"] if row else None)
    if reason is None:
        return None
    prefix = f"{who}: " if who else ""
    if not enabled:
        done = StatisticsRefresh(
            False, f"{prefix}{reason}; not analyzed (analyze_after: false), autovacuum will"
        )
        log.info("%s", done.said)
        return done
    warnings: list[str] = []

    def heard(notice: Diagnostic) -> None:  # a role that may not analyze gets a WARNING
        if notice.severity_nonlocalized == "WARNING" and notice.message_primary:
            warnings.append(notice.message_primary)

    began = time.perf_counter()
    conn.add_notice_handler(heard)
    try:
        with bounded(conn, timeouts, reads=True):
            conn.execute(query("target_analyze", table=sql.Identifier(table.schema, table.name)))
    except psycopg.Error as failed:
        if conn.broken:
            raise
        done = StatisticsRefresh(
            False,
            f"{prefix}{reason}; ANALYZE {table} failed ({type(failed).__name__}: "
            f"{str(failed).strip()}); the statistics stay stale until autovacuum analyzes it",
        )
        log.warning("%s", done.said)
        return done
    finally:
        conn.remove_notice_handler(heard)
    if warnings:
        done = StatisticsRefresh(
            False,
            f"{prefix}{reason}; ANALYZE {table} skipped it: {'; '.join(warnings)} (the role "
            "needs to own the table, or MAINTAIN on it from PostgreSQL 17)",
        )
        log.warning("%s", done.said)
        return done
    done = StatisticsRefresh(
        True,
        f"{prefix}{reason}: ran ANALYZE {table} in {duration(time.perf_counter() - began)}, "
        "so the next plan estimates from fresh statistics",
    )
    log.info("%s", done.said)
    return done
