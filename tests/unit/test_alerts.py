"""Alerts without a database: the alerts: section's errors, what fires, and the message shapes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Any

import pytest

from retention.alerts.messages import (
    RUNBOOK,
    DeadLetters,
    RunFacts,
    deadline_alert,
    decide_alerts,
    heading_anchor,
    message_body,
    run_url,
)
from retention.policy import parse_policy
from retention.policy.model import AlertsSpec
from retention.queue.bound import DrainSetting, PassTime, judge
from retention.rows.cutoff import FutureRun, future_run_note
from tests.support.docs import docs_page
from tests.support.policies import policy_fields

EVERY = {
    "on_dirty": "ops_dirty",
    "on_lag": "ops_lag",
    "lag_minutes": 60,
    "on_dead_letters": "ops_dead",
    "on_failure": "ops_failure",
}


@pytest.mark.parametrize(
    ("alerts", "field", "message"),
    [
        (
            {},
            "alerts",
            "name at least one connection: on_dirty, on_lag, on_dead_letters, on_failure, "
            "on_deadline, on_erasure_late",
        ),
        ("ops", "alerts", "must be a mapping of fields"),
        (
            {"on_lag": "ops"},
            "alerts.lag_minutes",
            "on_lag needs lag_minutes (how long an eligible row may wait past its cutoff)",
        ),
        (
            {"on_deadline": "ops"},
            "alerts.deadline_minutes",
            "on_deadline needs deadline_minutes (how long after it is queued a run should end)",
        ),
        (
            {"on_dirty": "ops", "deadline_minutes": 30},
            "alerts.on_deadline",
            "deadline_minutes is set, so name the HTTP connection to tell in on_deadline",
        ),
        (
            {"on_dirty": "ops", "lag_minutes": 30},
            "alerts.on_lag",
            "lag_minutes is set, so name the HTTP connection to tell in on_lag",
        ),
        ({"on_dirty": 5}, "alerts.on_dirty", "must be a string, got 5"),
        ({"on_dirty": " "}, "alerts.on_dirty", "must be a non-empty string"),
        (
            {"on_lag": "ops", "lag_minutes": "60"},
            "alerts.lag_minutes",
            "must be a number, got '60'",
        ),
        (
            {"on_deadline": "ops", "deadline_minutes": 600_000},
            "alerts.deadline_minutes",
            "must be at most 525600.0, got 600000",
        ),
        (
            {"on_deadline": "ops", "deadline_minutes": float("inf")},
            "alerts.deadline_minutes",
            "must be a finite number, got inf",
        ),
        (
            {"on_dirty": "ops", "on_slack": "x"},
            "alerts.on_slack",
            "unknown field; known fields are on_dirty, on_lag, lag_minutes, on_dead_letters, "
            "on_failure, on_deadline, deadline_minutes, on_erasure_late",
        ),
    ],
)
def test_bad_alerts_sections_are_named_exactly(alerts: Any, field: str, message: str) -> None:
    policy, problems = parse_policy("m", policy_fields("m", alerts=alerts))
    assert policy is None
    assert [(p.field, p.message) for p in problems] == [(field, message)]


def test_alerts_default_to_none_and_name_their_targets() -> None:
    plain, _ = parse_policy("m", policy_fields("m"))
    assert plain is not None
    assert plain.alerts is None
    policy, problems = parse_policy(
        "m", policy_fields("m", alerts={**EVERY, "on_deadline": "pager", "deadline_minutes": 90})
    )
    assert problems == []
    assert policy is not None
    assert policy.alerts is not None
    assert policy.alerts.targets() == {
        "dirty": "ops_dirty",
        "lag": "ops_lag",
        "dead_letters": "ops_dead",
        "failure": "ops_failure",
        "deadline": "pager",
    }


def summary(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "policy": "media",
        "dag_id": "retention__media",
        "run_id": "scheduled__2026-03-01T00:00:00+00:00",
        "table": "public.media",
        "status": "clean",
        "dry_run": False,
        "cutoff": "2026-02-01T00:00:00+00:00",
        "windows": 4,
        "windows_unfinished": [],
        "rows_deleted": 1200,
        "rows_remaining": 0,
        "rows_remaining_in_windows": 0,
        "rows_outside_windows": 0,
        "dirty_windows": [],
    }
    return {**base, **overrides}


def facts(**overrides: Any) -> RunFacts:
    base: dict[str, Any] = {
        "policy": "media",
        "dag_id": "retention__media",
        "run_id": "scheduled__2026-03-01T00:00:00+00:00",
        "summary": summary(),
    }
    return RunFacts(**{**base, **overrides})


SPEC = AlertsSpec.model_validate(EVERY)
DIRTY = summary(
    status="dirty",
    rows_remaining=130,
    rows_remaining_in_windows=30,
    rows_outside_windows=100,
    windows_unfinished=["media|w3"],
    dirty_windows=[{"window_key": "k", "label": "ids 1–500", "rows_remaining": 30}],
)


def kinds(run: RunFacts, spec: AlertsSpec = SPEC, *, remote: bool = False) -> list[tuple[str, str]]:
    return [(a.kind, a.conn_id) for a in decide_alerts(spec, run, remote=remote)]


def test_a_clean_run_fires_nothing() -> None:
    assert kinds(facts()) == []
    assert kinds(facts(lag_hours=0.5)) == [], "half an hour is under lag_minutes (60)"


def test_a_dirty_run_fires_on_dirty_once_and_not_on_failure_too() -> None:
    run = facts(summary=DIRTY, failed_tasks=("delete_window_3", "reconcile"))
    assert kinds(run) == [("dirty", "ops_dirty")]
    alert = decide_alerts(SPEC, run, remote=False)[0]
    assert alert.text == (
        "retention__media run scheduled__2026-03-01T00:00:00+00:00 is dirty: 130 rows older "
        "than cutoff 2026-02-01T00:00:00+00:00 remain in public.media (1,200 deleted). "
        "Rows left in windows: ids 1–500: 30. 100 are outside every planned window. "
        "Unfinished windows: media|w3."
    )
    assert alert.figures["rows_remaining"] == 130
    assert alert.runbook.heading == "A dirty run"


def test_a_dirty_run_goes_to_on_failure_when_on_dirty_is_not_set() -> None:
    spec = AlertsSpec.model_validate({"on_failure": "ops_failure"})
    run = facts(summary=DIRTY, failed_tasks=("reconcile",))
    alerts = decide_alerts(spec, run, remote=False)
    assert [(a.kind, a.conn_id) for a in alerts] == [("failure", "ops_failure")]
    assert alerts[0].text == (
        "retention__media run scheduled__2026-03-01T00:00:00+00:00 failed: task(s) reconcile "
        "failed or could not run. Reconcile recorded the run as dirty."
    )


def test_a_failure_without_a_summary_says_so_and_points_at_its_runbook_section() -> None:
    run = facts(summary=None, failed_tasks=("plan_windows", "reconcile"))
    [alert] = decide_alerts(SPEC, run, remote=False)
    assert alert.kind == "failure"
    assert alert.text.endswith("No run summary was recorded.")
    assert alert.runbook.heading == "A dirty run"
    remote = decide_alerts(SPEC, facts(failed_tasks=("delete_window_0",)), remote=True)
    assert remote[0].runbook.heading == "An API outage"
    delivery = decide_alerts(SPEC, facts(failed_tasks=("deliver_events",)), remote=True)
    assert delivery[0].runbook.heading == "A 410 receiver"


def test_a_failure_alert_tells_a_status_a_newer_release_wrote() -> None:
    """A summary read back keeps a status this release does not know as its text (a
    rollback after a newer release ran): the failure alert still goes out, quoting it."""
    run = facts(summary=summary(status="archived"), failed_tasks=("reconcile",))
    [alert] = decide_alerts(SPEC, run, remote=False)
    assert (alert.kind, alert.figures["status"]) == ("failure", "archived")
    [known] = decide_alerts(SPEC, facts(summary=DIRTY, failed_tasks=("reconcile",)), remote=False)
    assert known.figures["status"] == "dirty"


def test_lag_fires_past_lag_minutes_only() -> None:
    assert kinds(facts(lag_hours=0.99)) == []
    late = facts(summary=summary(status="backlog", rows_remaining=7), lag_hours=1.5)
    assert kinds(late) == [("lag", "ops_lag")]
    [alert] = decide_alerts(SPEC, late, remote=True)
    assert "became eligible 1.5 hours ago, more than lag_minutes (60)" in alert.text
    assert alert.runbook.heading == "An API outage"


@pytest.mark.parametrize(
    ("figures", "verdict", "heading"),
    [
        (
            PassTime(
                seconds=10,
                calling=9,
                calls=50,
                pool_sampled=10,
                pool_busy=9.7,
                pool_slot_seconds=20,
                rate_seconds=200,
            ),
            "capacity",
            "Changing batch size and pool slots mid-flight",
        ),
        (
            PassTime(seconds=10, calling=3, calls=15, limiter=6.5, rate_seconds=42),
            "upstream",
            "An API outage",
        ),
    ],
    ids=["capacity", "upstream"],
)
def test_the_lag_alert_says_what_bounded_the_drain(
    figures: PassTime, verdict: str, heading: str
) -> None:
    """A lagging remote run names what held its drain back, and the runbook that tunes it:
    the pool's slots when the pool was short of them, the API's section otherwise."""
    bound = judge(figures, DrainSetting("media_api", 1, 20))
    recorded = summary(status="backlog", rows_remaining=7, bound=dataclasses.asdict(bound))
    [alert] = decide_alerts(SPEC, facts(summary=recorded, lag_hours=1.5), remote=True)
    assert alert.text.endswith(f" The drain was {bound.says}.")
    assert alert.figures["bound_by"] == verdict
    assert alert.figures["slots_needed"] == (5 if verdict == "capacity" else None)
    assert alert.runbook.heading == heading


def test_the_lag_alert_names_each_run_airflow_will_not_start_yet_with_the_fix() -> None:
    """A run triggered with a logical date still to come sits "running" with every task "No
    Status"; the lag alert names it, its date, how far ahead and the fix, in the view's words
    (``future_run_note``), and counts those past the first five."""
    now = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC)
    christmas = dt.datetime(2026, 12, 25, tzinfo=dt.UTC)
    typo = FutureRun("retention__media", "manual__typo", christmas, "running")
    late = facts(
        summary=summary(status="backlog", rows_remaining=7),
        lag_hours=30.0,
        future_runs=(typo,),
        now=now,
    )
    [alert] = decide_alerts(SPEC, late, remote=False)
    note = future_run_note("manual__typo", christmas, now)
    assert "run manual__typo has the logical date 2026-12-25 (24 days ahead)" in note
    assert alert.text.endswith(" Not started by Airflow: " + note)
    assert "Mark run manual__typo failed (in Airflow: open the run" in alert.text
    assert alert.figures["future_runs"] == [
        {"run_id": "manual__typo", "logical_date": "2026-12-25T00:00:00+00:00"}
    ]
    many = tuple(
        dataclasses.replace(typo, run_id=f"manual__{i}", logical_date=christmas) for i in range(7)
    )
    [alert] = decide_alerts(SPEC, dataclasses.replace(late, future_runs=many), remote=False)
    assert alert.text.count("Airflow starts none of its tasks before then") == 5
    assert alert.text.endswith(" And 2 more such run(s) of the DAG.")
    assert len(alert.figures["future_runs"]) == 7
    # the REST API answers one page: the count of the rest is its total_entries
    paged = dataclasses.replace(late, future_runs=many, future_runs_total=120)
    [alert] = decide_alerts(SPEC, paged, remote=False)
    assert alert.text.endswith(" And 115 more such run(s) of the DAG.")
    assert alert.figures["future_runs_total"] == 120
    [unread] = decide_alerts(SPEC, dataclasses.replace(late, future_runs=()), remote=False)
    assert "Not started" not in unread.text
    assert "future_runs" not in unread.figures


def test_dead_letters_fire_only_for_new_ones() -> None:
    old = DeadLetters(dead_operations=4, dead_events=2)
    assert kinds(facts(dead=old)) == []
    new = DeadLetters(
        new_operations=3,
        new_operations_by_class={"rejected": 2, "exhausted": 1},
        dead_operations=7,
        new_events=1,
        dead_events=3,
    )
    [alert] = decide_alerts(SPEC, facts(dead=new), remote=True)
    assert (alert.kind, alert.conn_id) == ("dead_letters", "ops_dead")
    assert alert.text == (
        "retention__media run scheduled__2026-03-01T00:00:00+00:00: 3 operation(s) went dead "
        "(exhausted: 1, rejected: 2) and 1 event(s) went dead during this run; 7 operation(s) "
        "and 3 event(s) are dead in all."
    )


def test_a_dry_run_only_tells_of_failures() -> None:
    dry = summary(status="dry_run", dry_run=True, rows_remaining=900)
    run = facts(summary=dry, lag_hours=500.0, dead=DeadLetters(new_operations=1))
    assert kinds(run) == []
    assert kinds(facts(summary=dry, failed_tasks=("plan_windows",))) == [("failure", "ops_failure")]


def test_one_cause_is_told_once_and_other_causes_on_their_own() -> None:
    run = facts(
        summary=DIRTY,
        failed_tasks=("purge_audit",),
        lag_hours=99.0,
        dead=DeadLetters(new_operations=1, dead_operations=1),
    )
    assert sorted(kinds(run)) == [("dead_letters", "ops_dead"), ("dirty", "ops_dirty")]
    [dirty] = [a for a in decide_alerts(SPEC, run, remote=False) if a.kind == "dirty"]
    assert dirty.figures["lag_hours"] == 99.0, "the dirty message carries the lag"
    no_dirty = AlertsSpec.model_validate({k: v for k, v in EVERY.items() if k != "on_dirty"})
    assert sorted(kinds(run, no_dirty)) == [
        ("dead_letters", "ops_dead"),
        ("failure", "ops_failure"),
        ("lag", "ops_lag"),
    ]


RUN_ID = "manual__2026-03-01T00:00:00+00:00"


def test_the_plain_json_message_names_policy_run_problem_and_first_step() -> None:
    [alert] = decide_alerts(SPEC, facts(run_id=RUN_ID, summary=DIRTY), remote=False)
    url = run_url("https://airflow.example.com/", "retention__media", RUN_ID)
    assert url == (
        "https://airflow.example.com/dags/retention__media/runs/"
        "manual__2026-03-01T00%3A00%3A00%2B00%3A00"
    )
    body = message_body(
        alert, policy="media", dag_id="retention__media", run_id=RUN_ID, url=url, fmt="json"
    )
    assert set(body) == {
        "type",
        "kind",
        "policy",
        "dag_id",
        "run_id",
        "title",
        "message",
        "figures",
        "runbook",
        "run_url",
    }
    assert (body["type"], body["kind"], body["policy"], body["run_id"]) == (
        "retention.alert",
        "dirty",
        "media",
        RUN_ID,
    )
    assert body["title"] == "Retention media: dirty run"
    assert body["message"] == alert.text
    assert body["figures"]["rows_remaining"] == 130
    assert body["runbook"] == {
        "section": "A dirty run",
        "first_step": RUNBOOK["dirty"].first_step,
        "link": "docs/runbook.md#a-dirty-run",
    }
    assert body["run_url"] == url
    assert run_url(None, "retention__media", RUN_ID) is None


def test_the_slack_message_is_an_incoming_webhook_payload() -> None:
    [alert] = decide_alerts(SPEC, facts(run_id=RUN_ID, summary=DIRTY), remote=False)
    body = message_body(
        alert,
        policy="media",
        dag_id="retention__media",
        run_id=RUN_ID,
        url="https://a.example/dags/x/runs/y",
        fmt="slack",
    )
    assert set(body) == {"text", "blocks"}
    assert body["text"] == f"Retention media: dirty run: {alert.text}"
    header, problem, step, context = body["blocks"]
    assert header == {
        "type": "header",
        "text": {"type": "plain_text", "text": "Retention media: dirty run"},
    }
    assert problem == {"type": "section", "text": {"type": "mrkdwn", "text": alert.text}}
    assert step["text"]["text"].startswith(
        "*First step* (docs/runbook.md#a-dirty-run): Read what remains and why"
    )
    assert context["elements"][0]["text"] == (
        "policy `media` · retention__media · run <https://a.example/dags/x/runs/y|" + RUN_ID + ">"
    )


def test_slack_blocks_stay_within_slacks_limits() -> None:
    long_windows = [f"window-{i}-" + "x" * 80 for i in range(200)]
    run = facts(summary={**DIRTY, "windows_unfinished": long_windows}, run_id="r" * 300)
    [alert] = decide_alerts(SPEC, run, remote=False)
    body = message_body(alert, policy="p" * 100, dag_id="d", run_id="r", url=None, fmt="slack")
    assert len(body["blocks"][0]["text"]["text"]) <= 150
    assert all(len(b["text"]["text"]) <= 3000 for b in body["blocks"][1:3])
    assert "and 195 more" in alert.text, "long lists are cut, with a count of the rest"


def test_the_deadline_message_reports_how_far_the_run_came() -> None:
    alert = deadline_alert(
        "pager",
        policy="media",
        dag_id="retention__media",
        run_id=RUN_ID,
        deadline_minutes=90,
        dag_run={"state": "running", "queued_at": "2026-03-01T00:00:05Z"},
        deadline_time="2026-03-01T01:30:05Z",
        progress={
            "windows": 8,
            "windows_done": 3,
            "rows_deleted": 45000,
            "rows_planned": 120000,
            "dry_run": False,
        },
    )
    assert (alert.kind, alert.conn_id, alert.runbook.heading) == (
        "deadline",
        "pager",
        "Changing batch size and pool slots mid-flight",
    )
    assert alert.text == (
        f"retention__media run {RUN_ID} has not finished 90 minutes after it was queued "
        "(queued 2026-03-01T00:00:05Z, deadline 2026-03-01T01:30:05Z); it is running. "
        "3 of 8 windows are done, 45,000 rows deleted of about 120,000 planned."
    )
    unplanned = deadline_alert(
        "pager",
        policy="media",
        dag_id="retention__media",
        run_id=RUN_ID,
        deadline_minutes=90,
        dag_run={"state": "queued"},
        deadline_time=None,
        progress=None,
    )
    assert unplanned.text.endswith("it is queued. Its windows are not planned yet.")
    waiting = deadline_alert(
        "pager",
        policy="media",
        dag_id="retention__media",
        run_id=RUN_ID,
        deadline_minutes=90,
        dag_run={"state": "running"},
        deadline_time=None,
        progress=None,
        waiting_for="backfill__2026-02-28",
    )
    assert waiting.text.endswith(
        "it is running. It has not started: it waits for run backfill__2026-02-28, which "
        "holds the policy's run lease (runs of one policy never overlap)."
    ), "a queued backfill run is late because of the runs before it"
    assert waiting.figures["waiting_for"] == "backfill__2026-02-28"


def test_runbook_anchors_are_githubs() -> None:
    assert {key: step.anchor for key, step in RUNBOOK.items()} == {
        "dirty": "#a-dirty-run",
        "outage": "#an-api-outage",
        "dead_letters": "#dead-letters-replay-or-not",
        "receiver": "#a-410-receiver",
        "erasure_late": "#an-erasure-is-late",
        "slow": "#changing-batch-size-and-pool-slots-mid-flight",
    }
    assert heading_anchor("Stopping and pausing a run") == "stopping-and-pausing-a-run"


def test_the_docs_document_alerts_and_have_the_runbook_sections_alerts_link_to() -> None:
    assert docs_page("alerts").startswith("# Alerts\n")
    fields = docs_page("policies")
    for field in ("on_dirty", "on_lag", "on_dead_letters", "on_failure", "on_deadline"):
        assert f"`alerts.{field}`" in fields, f"{field} is in the generated field table"
    runbook = docs_page("runbook")
    assert runbook.startswith("# Runbook\n")
    headings = set(re.findall(r"^## (.+)$", runbook, flags=re.MULTILINE))
    missing = [step.heading for step in RUNBOOK.values() if step.heading not in headings]
    assert missing == [], "alerts link to runbook sections that are not in docs/runbook.md"


def test_the_deadline_alert_of_a_run_with_a_future_logical_date_names_it_and_the_fix() -> None:
    """Airflow starts no task of such a run before its date: it is late, not slow."""
    now = dt.datetime(2026, 12, 1, 9, tzinfo=dt.UTC)
    alert = deadline_alert(
        "pager",
        policy="media",
        dag_id="retention__media",
        run_id="manual__typo",
        deadline_minutes=90,
        dag_run={"state": "running", "logical_date": "2026-12-22T00:00:00Z"},
        deadline_time=None,
        progress=None,
        now=now,
    )
    assert alert.text.endswith(
        "it is running. It has not started: run manual__typo has the logical date 2026-12-22 "
        "(21 days ahead): Airflow starts none of its tasks before then (the scheduler logs "
        '"Logical date is in future"), so it shows "running" with every task "No Status". '
        "Mark run manual__typo failed (in Airflow: open the run, Mark Dag Run as… → Failed), "
        "then trigger with a logical date that is not in the future, or leave it empty."
    )
    assert alert.figures["logical_date_in_future"] == "2026-12-22T00:00:00+00:00"
    past = deadline_alert(
        "pager",
        policy="media",
        dag_id="retention__media",
        run_id="scheduled__x",
        deadline_minutes=90,
        dag_run={"state": "running", "logical_date": "2026-11-30T00:00:00Z"},
        deadline_time=None,
        progress=None,
        now=now,
    )
    assert past.text.endswith("Its windows are not planned yet.")
