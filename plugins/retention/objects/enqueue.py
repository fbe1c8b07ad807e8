"""A window's remote deletions into the ledger: one pending operation per eligible row.

The upsert is keyed by the operation key (``retention.objects.keys``), so
enqueueing a window again adds nothing for rows it already holds.
"""

from __future__ import annotations

from typing import Any

from retention.db.connection import Connection, bounded
from retention.policy.model import Policy
from retention.rows.target import TargetTable
from retention.rows.windows import Window


def enqueue_window(conn: Connection, policy: Policy, window: Window, batch_rows: int) -> int:
    """Upsert one pending operation per eligible row of the window; returns rows inserted."""
    target = TargetTable.of(policy.table_spec, policy.remote)
    bound = target.query("target_batch_bound", window.tenant_scope)
    insert = target.query("ops_enqueue", window.tenant_scope)
    after, inserted = window.first_id - 1, 0
    while True:
        params: dict[str, Any] = {
            "after": after,
            "last_id": window.last_id,
            "batch_rows": batch_rows,
            "tenant": window.tenant,
            "cutoff": window.cutoff,
            "policy": policy.name,
            "revision": policy.revision,
            "table_name": policy.table,
            "window_key": window.window_key,
        }
        with bounded(conn, policy.timeouts, timezone=policy.timestamp_timezone):
            row = conn.execute(bound, params).fetchone()
            if row is None or not row["keys"]:
                return inserted
            inserted += conn.execute(insert, {**params, "upto": row["upto"]}).rowcount
        if row["keys"] < batch_rows:
            return inserted
        after = row["upto"]
