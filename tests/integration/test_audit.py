"""Audit retention: evidence is purged after audit_days, never before, in batches."""

from __future__ import annotations

import datetime as dt

from retention.evidence.audit import purge_audit
from retention.objects.operations import enqueue_window
from retention.rows.planner import plan_windows
from tests.support.policies import remote_policy
from tests.support.remote import work
from tests.support.tables import count, create_media_table, request


def test_evidence_is_kept_for_audit_days_then_purged(db, unique_name, sandbox, test_dsn) -> None:
    policy = remote_policy(unique_name, notify={"http_conn_id": "unused", "endpoint": "/e"})
    assert policy.audit_days == 400
    create_media_table(db, unique_name, 6)
    sandbox.state.configure(reject=["obj-6"])
    for window in plan_windows(db, request(policy)):
        enqueue_window(db, policy, window, 100)
    work(test_dsn, policy, sandbox)
    now = dt.datetime.now(dt.UTC)
    ages = {"obj-1": 401, "obj-2": 401, "obj-3": 399, "obj-4": 399.9, "obj-5": 10, "obj-6": 500}
    for object_id, days in ages.items():
        db.execute(
            "UPDATE retention.operations SET done_at = CASE WHEN state = 'done' THEN %s END, "
            "updated_at = %s WHERE policy = %s AND object_id = %s",
            (now - dt.timedelta(days=days), now - dt.timedelta(days=days), policy.name, object_id),
        )
    db.execute(
        "UPDATE retention.windows SET planned_at = %s WHERE policy = %s",
        (now - dt.timedelta(days=401), policy.name),
    )
    db.execute(
        "UPDATE retention.runs SET planned_at = %s WHERE policy = %s",
        (now - dt.timedelta(days=401), policy.name),
    )
    recent = plan_windows(db, request(policy, run_id="recent-run"))  # planned now: kept
    assert recent
    for webhook_id, age in (("msg_old", 401), ("msg_recent", 1)):
        db.execute(
            "INSERT INTO retention.hint_receipts (webhook_id, policy, objects, received_at) "
            "VALUES (%s, %s, 1, %s)",
            (f"{webhook_id}_{unique_name}", policy.name, now - dt.timedelta(days=age)),
        )

    result = purge_audit(db, policy.name, policy.audit_days, now=now, batch_rows=1)
    assert (result["operations"], result["attempts"], result["events"]) == (2, 2, 2)
    left = {
        r["object_id"]: r["state"]
        for r in db.execute(
            "SELECT object_id, state FROM retention.operations WHERE policy = %s", (policy.name,)
        )
    }
    assert left == {"obj-3": "done", "obj-4": "done", "obj-5": "done", "obj-6": "dead"}
    remaining_attempts = count(
        db,
        "SELECT count(*) FROM retention.attempts AS a "
        "JOIN retention.operations AS o USING (operation_key) WHERE o.policy = %s",
        policy.name,
    )
    assert remaining_attempts == 4
    assert count(db, "SELECT count(*) FROM retention.outbox WHERE policy = %s", policy.name) == 3
    windows = db.execute(
        "SELECT DISTINCT run_id FROM retention.windows WHERE policy = %s ORDER BY run_id",
        (policy.name,),
    ).fetchall()
    # run-1's window is old, but the dead operation of obj-6 still names it: kept, so
    # explain can say where that operation came from; the recent plan is kept too.
    assert [w["run_id"] for w in windows] == ["recent-run", "run-1"]
    runs = db.execute(
        "SELECT run_id FROM retention.runs WHERE policy = %s ORDER BY run_id", (policy.name,)
    )
    assert [r["run_id"] for r in runs] == ["recent-run", "run-1"]
    receipts = db.execute(
        "SELECT webhook_id FROM retention.hint_receipts WHERE policy = %s", (policy.name,)
    )
    assert [r["webhook_id"] for r in receipts] == [f"msg_recent_{unique_name}"]
    assert result["hint_receipts"] == 1
    again = purge_audit(db, policy.name, policy.audit_days, now=now)
    assert again["operations"] == 0
