"""Audit retention: keep deletion evidence exactly ``audit_days``, then purge it in batches.

Evidence of a deletion (the done operation, its attempts and its event) is
purged once it was confirmed more than ``audit_days`` ago, never before; the
window ledger and run summaries go once planned more than ``audit_days`` ago.
Live work (pending, in-flight, held and dead operations) is never purged, nor the
discard record that explains a dead operation, nor an active legal hold; a lifted
hold is evidence and goes ``audit_days`` after it was lifted. So does a finished
erasure (done, blocked_by_hold or failed), with its receipt, ``audit_days`` after it
finished; an unfinished one (requested, running) is never purged. Each batch
is one short transaction, so purging never holds locks for long.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter

from retention.db.connection import Connection
from retention.db.sqlfiles import query

log = logging.getLogger(__name__)

PURGE_BATCH_ROWS = 5000


def purge_audit(
    conn: Connection,
    policy: str,
    audit_days: int,
    *,
    now: dt.datetime | None = None,
    batch_rows: int = PURGE_BATCH_ROWS,
    max_batches: int = 1000,
) -> dict[str, object]:
    """Purge everything of ``policy`` past its audit horizon; returns counts per kind."""
    horizon = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=audit_days)
    params = {"policy": policy, "horizon": horizon, "batch_rows": batch_rows}
    purged: Counter[str] = Counter()
    # finished erasures only, with their receipts; an unfinished one is never purged
    for name in ("purge_operations", "purge_windows", "purge_erasures"):
        for _ in range(max_batches):
            row = conn.execute(query(name), params).fetchone()
            assert row is not None
            purged.update({k: int(v) for k, v in row.items()})
            if not any(row.values()):
                break
    for name, kind in (
        ("purge_hint_receipts", "hint_receipts"),
        ("purge_replays", "replays"),
        ("purge_discards", "discards"),  # only those that explain nothing any more
        ("purge_holds", "holds"),  # only lifted ones; an active hold is never purged
    ):
        for _ in range(max_batches):
            gone = conn.execute(query(name), params).rowcount
            purged[kind] += gone
            if not gone:
                break
    log.info("policy %s: purged evidence older than %s: %s", policy, horizon, dict(purged))
    return {"horizon": horizon.isoformat(), **purged}


def purge_removed_policies(
    conn: Connection,
    known: set[str],
    audit_days: int,
    *,
    now: dt.datetime | None = None,
    batch_rows: int = PURGE_BATCH_ROWS,
) -> dict[str, dict[str, object]]:
    """Purge, past ``audit_days``, the evidence of policies no longer in the policies file.

    A policy that was removed or renamed has no DAG left to purge its rows;
    every policy DAG's ``purge_audit`` does it for them. ``known`` holds every
    name in the policies file, valid or not (a policy with a typo is not
    removed), and ``audit_days`` is the longest of the current policies' and
    the default, so evidence is never purged sooner than it would have been.
    """
    with conn.transaction():
        conn.execute("SET LOCAL statement_timeout = '120s'")
        names = [row["policy"] for row in conn.execute(query("ledger_policies"))]
    purged: dict[str, dict[str, object]] = {}
    for name in sorted(set(names) - known):
        purged[name] = purge_audit(conn, name, audit_days, now=now, batch_rows=batch_rows)
        # its alert ledger (send_alerts, which purges it for live policies, never runs
        # again) and its run lease row, unless a run still holds it
        purged[name]["alerts"] = conn.execute(
            query("alert_purge"), {"policy": name, "days": audit_days}
        ).rowcount
        purged[name]["run_lease"] = conn.execute(
            query("run_lease_forget"), {"policy": name}
        ).rowcount
    return purged
