"""The typed run summary: the JSON it writes keeps today's keys, order and optional
blocks (external readers parse ``retention.runs.summary`` and the XCom), and whatever
was stored, reconciled or partial, reads back typed."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from retention.summary import (
    BoundEvidence,
    CoveredBy,
    DirtyWindow,
    EventEvidence,
    RemoteEvidence,
    RunStatus,
    RunSummary,
    covered_note,
    rate_limit_headers_note,
)

LOCAL_KEYS = [
    "run_kind",
    "policy",
    "dag_id",
    "run_id",
    "plan_id",
    "table",
    "status",
    "dry_run",
    "cutoff",
    "anchor_source",
    "logical_date",
    "windows",
    "windows_unfinished",
    "windows_failed",
    "rows_planned",
    "rows_planned_is_estimate",
    "rows_deleted",
    "rows_deleted_by_windows",
    "rows_deleted_by_drain",
    "rows_counted",
    "rows_remaining",
    "rows_remaining_in_windows",
    "rows_outside_windows",
    "dirty_windows",
    "plan_seconds",
    "delete_seconds",
    "longest_batch_ms",
    "reconcile_seconds",
    "plan_notes",
    "partitions",
    "partitions_finished",
    "partitions_stranded",
    "partitions_detach_pending",
    "partition_problems",
    "pauses",
    "paused_seconds",
    "pause_reasons",
    "rows_held",
    "objects_held",
]


def stored(**blocks: Any) -> dict[str, Any]:
    """A dirty run's summary as reconcile stores it (values per key, then the blocks)."""
    data: dict[str, Any] = dict.fromkeys(LOCAL_KEYS)
    data |= {
        "run_kind": "deletion",
        "policy": "media",
        "status": "dirty",
        "dry_run": False,
        "cutoff": "2026-10-31T12:00:00+00:00",
        "windows": 3,
        "windows_unfinished": ["media:p:w0003"],
        "windows_failed": [],
        "rows_planned_is_estimate": True,
        "rows_remaining": 12,
        "rows_remaining_in_windows": 12,
        "rows_outside_windows": 0,
        "dirty_windows": [
            {"window_key": "media:p:w0003", "label": "ids 1–99", "rows_remaining": 12}
        ],
        "plan_notes": [],
        "partitions": [],
        "partitions_finished": [],
        "partitions_stranded": [{"partition": "media_p1", "run_id": "r0", "state": "detached"}],
        "partitions_detach_pending": [],
        "partition_problems": ["media_p1 is detached, not dropped (run r0)"],
        "pauses": 0,
        "paused_seconds": 0.0,
        "pause_reasons": {},
        "rows_held": 0,
    }
    return data | blocks


REMOTE = {
    "remote": {
        "eligible_rows_by_state": {"pending": 10, "dead": 2},
        "unexplained_rows": 0,
        "oldest_overdue_hours": 1.25,
        "attempts_by_outcome": {"confirmed": 900, "rate_limited": 4},
        "rate_limited_responses": 4,
        "lease_expiries": 0,
        "dead_total": 2,
        "ledger_backlog": {},
        "effective_rate": 7.5,
    },
    "max_lag_hours": None,
    "drain": {"passes": 1, "rows_deleted": 0, "errors": []},
}
EVENTS = {
    "events": {
        "delivered_this_run": 211,
        "pending_after_delivery": 0,
        "pending_why": None,
        "by_state": {"delivered": 211},
        "overdue": 0,
        "endpoint_disabled_at": None,
        "delivery": {"done": 211},
        "problems": ["2 dead event(s): replay them"],
    }
}


def test_a_local_summary_round_trips_with_its_keys_in_order() -> None:
    data = stored(other_runs=[])
    summary = RunSummary.of(data)
    assert summary.dirty_windows == [
        DirtyWindow(window_key="media:p:w0003", label="ids 1–99", rows_remaining=12)
    ]
    assert summary.remote is None
    assert summary.events is None
    assert summary.to_json() == data
    assert list(summary.to_json()) == [*LOCAL_KEYS, "other_runs"]


def test_remote_and_event_blocks_round_trip_typed() -> None:
    data = stored(**REMOTE, other_runs=[], **EVENTS)
    summary = RunSummary.of(data)
    assert isinstance(summary.remote, RemoteEvidence)
    assert summary.remote.eligible_rows_by_state == {"pending": 10, "dead": 2}
    assert isinstance(summary.events, EventEvidence)
    assert summary.event_problems == ["2 dead event(s): replay them"]
    assert summary.to_json() == data
    assert list(summary.to_json()) == [*LOCAL_KEYS, *REMOTE, "other_runs", "events"]
    # max_lag_hours is written with the remote block even when the policy sets none
    assert summary.to_json()["max_lag_hours"] is None


def test_what_bounded_the_drain_is_a_typed_block_after_the_drain() -> None:
    """A remote run's verdict on its drain is written after ``drain`` when it was judged;
    a summary stored before it (no ``bound``) reads and writes back without one."""
    bound = {
        "verdict": "capacity",
        "says": "capacity-bound: pool `media_api` has 2 slots, busy 97% of the time; at 180 ms "
        "per call, 20/s needs 5",
        "limiter_share": 0.0,
        "waiting_for_work_share": 0.01,
        "pool_busy_share": 0.97,
        "database_share": 0.0,
        "working_share": 0.99,
        "mean_call_ms": 180.0,
        "effective_rate": 20.0,
        "rate_per_second": 20.0,
        "pool": "media_api",
        "pool_slots": 2,
        "slots_needed": 5,
        "pool_unread": None,
        "worker_seconds": 10.0,
        "calls": 50,
    }
    data = stored(**REMOTE, bound=bound, other_runs=[])
    summary = RunSummary.of(data)
    assert isinstance(summary.bound, BoundEvidence)
    assert (summary.bound.verdict, summary.bound.slots_needed) == ("capacity", 5)
    assert summary.to_json() == data
    assert list(summary.to_json()) == [*LOCAL_KEYS, *REMOTE, "bound", "other_runs"]
    assert "bound" not in RunSummary.of(stored(**REMOTE, other_runs=[])).to_json()


def test_a_partial_summary_of_a_stopped_run_reads_typed() -> None:
    partial = {
        "policy": "media",
        "run_id": "r1",
        "status": "cancelled",
        "partial": True,
        "reason": "SIGTERM",
        "dry_run": False,
        "cutoff": "2026-10-31T12:00:00+00:00",
        "windows": 4,
        "windows_by_state": {"done": 3, "cancelled": 1},
        "rows_deleted": 30,
        "rows_counted": None,
        "stopped_at": "2026-11-30T12:05:00+00:00",
        "a_key_a_newer_writer_added": 1,
    }
    summary = RunSummary.of(partial)
    assert (summary.status, summary.partial, summary.rows_deleted) == ("cancelled", True, 30)
    assert summary.windows_by_state == {"done": 3, "cancelled": 1}
    assert summary.rows_remaining is None
    assert summary.event_problems == []


def test_a_status_a_newer_release_wrote_stays_readable() -> None:
    """A status this release does not know does not fail the reader (a whole view page, a
    report): it stays the string stored, equals no RunStatus member and writes back the same."""
    data = stored(other_runs=[]) | {"status": "paused_by_a_newer_release"}
    summary = RunSummary.from_stored(data)
    assert summary is not None
    assert summary.status == "paused_by_a_newer_release"
    assert not isinstance(summary.status, RunStatus)
    assert summary.status not in set(RunStatus)
    assert summary.to_json() == data
    assert str(summary.status) == "paused_by_a_newer_release"
    assert RunSummary.of(stored()).status is RunStatus.DIRTY, "a known status reads typed"


def test_a_run_summary_passes_through() -> None:
    summary = RunSummary(policy="media", status="clean")
    assert RunSummary.of(summary) is summary


def test_the_alert_rules_read_the_typed_summary() -> None:
    from retention.alerts.messages import RunFacts, decide_alerts
    from retention.policy.model import AlertsSpec

    spec = AlertsSpec.model_validate({"on_dirty": "ops"})
    data = stored(**REMOTE, other_runs=[], **EVENTS)
    as_stored = RunFacts(policy="media", dag_id="retention__media", run_id="r1", summary=data)
    typed = RunFacts(
        policy="media", dag_id="retention__media", run_id="r1", summary=RunSummary.of(data)
    )
    assert as_stored.recorded == typed.recorded
    [alert] = decide_alerts(spec, typed, remote=True)
    assert decide_alerts(spec, as_stored, remote=True) == [alert]
    assert "Rows left in windows: ids 1–99: 12." in alert.text
    assert "media_p1 is detached, not dropped (run r0)" in alert.text
    assert alert.figures["event_problems"] == ["2 dead event(s): replay them"]


def test_a_covered_run_names_the_run_that_deleted_its_rows() -> None:
    covered = CoveredBy.of_run(
        cutoff=dt.datetime(2026, 10, 26, tzinfo=dt.UTC),
        run_id="backfill__2026-11-27T00:00:00+00:00",
        logical_date=dt.datetime(2026, 11, 27, tzinfo=dt.UTC),
        its_cutoff=dt.datetime(2026, 10, 28, tzinfo=dt.UTC),
        finished_at=dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC),
    )
    assert covered.note == "nothing older than 2026-10-26 was left: run 2026-11-27 deleted it"
    data = {**stored(other_runs=[]), "covered_by": dataclasses.asdict(covered)}
    summary = RunSummary.of(data)
    assert summary.covered_by == covered
    assert summary.to_json() == data
    assert list(summary.to_json()) == [*LOCAL_KEYS, "other_runs", "covered_by"]
    assert "covered_by" not in RunSummary.of(stored(other_runs=[])).to_json()
    no_date = covered_note(dt.datetime(2026, 10, 26, 6, 30, tzinfo=dt.UTC), "manual__x", None)
    assert no_date == "nothing older than 2026-10-26 06:30Z was left: run manual__x deleted it"


def test_ignored_rate_limit_headers_are_one_line_only_when_there_were_some() -> None:
    note = rate_limit_headers_note("X-RateLimit-Remaining 50 is more than X-RateLimit-Limit 40")
    assert note == (
        "malformed or contradictory rate-limit headers ignored: "
        "X-RateLimit-Remaining 50 is more than X-RateLimit-Limit 40"
    )
    assert rate_limit_headers_note(None) is None
    data = {**stored(**REMOTE, other_runs=[]), "rate_limit_headers_note": note}
    summary = RunSummary.of(data)
    assert summary.rate_limit_headers_note == note
    assert summary.to_json() == data
    assert list(summary.to_json()) == [
        *LOCAL_KEYS,
        *REMOTE,
        "other_runs",
        "rate_limit_headers_note",
    ]
    assert "rate_limit_headers_note" not in RunSummary.of(stored(**REMOTE)).to_json()
