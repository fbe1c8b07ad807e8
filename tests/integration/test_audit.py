"""Audit retention: evidence is purged after audit_days, never before, in batches."""

from __future__ import annotations

import datetime as dt

from devtools.plans import request
from retention.evidence.audit import purge_audit
from retention.objects.enqueue import enqueue_window
from retention.rows.planner import plan_windows
from tests.support.policies import remote_policy
from tests.support.remote import work
from tests.support.tables import count, create_media_table


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


def test_evidence_of_removed_policies_and_old_replays_is_purged(db, unique_name) -> None:
    from retention.evidence.audit import purge_removed_policies

    gone = f"{unique_name}_removed"
    now = dt.datetime.now(dt.UTC)
    old, recent = now - dt.timedelta(days=500), now - dt.timedelta(days=5)
    for key, state, done_at in (
        ("old", "done", old),
        ("new", "done", recent),
        ("dead", "dead", None),
    ):
        db.execute(
            "INSERT INTO retention.operations (operation_key, policy, policy_revision, table_name, "
            "row_key, object_id, version, state, done_at, updated_at) "
            "VALUES (%s, %s, 1, 't', 1, 'o', '1', %s, %s, %s)",
            (f"{gone}-{key}", gone, state, done_at, done_at or old),
        )
    for when in (old, recent):
        db.execute(
            "INSERT INTO retention.replays (policy, requested_by, filters, operation_keys, "
            "replayed_at) VALUES (%s, 'ops', '{}', ARRAY[]::text[], %s)",
            (gone, when),
        )
    for when in (old, recent):
        db.execute(
            "INSERT INTO retention.alerts (policy, run_id, kind, conn_id, claimed_at, message) "
            "VALUES (%s, %s, 'dirty', 'ops', %s, '{}')",
            (gone, f"run-{when:%j}", when),
        )
    db.execute(
        "INSERT INTO retention.run_leases (policy, dag_id, run_id) VALUES (%s, 'd', NULL)",
        (gone,),
    )
    purged = purge_removed_policies(db, {unique_name}, audit_days=400, now=now)
    assert purged[gone]["operations"] == 1
    assert purged[gone]["replays"] == 1
    assert purged[gone]["alerts"] == 1, "the old alert goes, the recent one stays"
    assert purged[gone]["run_lease"] == 1
    assert count(db, "SELECT count(*) FROM retention.alerts WHERE policy = %s", gone) == 1
    left = db.execute(
        "SELECT operation_key FROM retention.operations WHERE policy = %s ORDER BY 1", (gone,)
    )
    assert [r["operation_key"] for r in left] == [f"{gone}-dead", f"{gone}-new"]
    assert count(db, "SELECT count(*) FROM retention.replays WHERE policy = %s", gone) == 1
    kept = purge_removed_policies(db, {unique_name, gone}, audit_days=400, now=now)
    assert gone not in kept, "a policy still in the file is never purged as removed"


def test_events_pending_too_long_make_the_run_dirty(db, unique_name) -> None:
    from retention.evidence.reconcile import explain_events

    policy = remote_policy(unique_name, notify={"http_conn_id": "e", "endpoint": "/e"}).model_copy(
        update={"max_lag_hours": 2}
    )
    db.execute(
        "INSERT INTO retention.outbox (event_id, policy, operation_key, event_type, payload, "
        "created_at) VALUES (%s, %s, 'k', 'retention.deleted', '{}', now() - interval '3 hours'),"
        " (%s, %s, 'k2', 'retention.deleted', '{}', now())",
        (f"evt_{unique_name}_1", policy.name, f"evt_{unique_name}_2", policy.name),
    )
    events = explain_events(db, policy, {"done": 0})
    assert events["overdue"] == 1
    assert events["problems"] == ["1 event(s) pending for more than 2 hours"]
    assert explain_events(db, policy, None)["problems"][-1] == (
        "deliver_events did not run in this run"
    )
