"""What an alert says: the rules that decide which alerts a finished run fires, and
the messages (plain JSON or Slack's incoming-webhook shape) with the runbook's
first step. Pure: no database, no network (``retention.alerts.delivery`` sends).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from retention.policy.model import AlertsSpec
from retention.rows.cutoff import FutureRun, future_run_note
from retention.summary import RunStatus, RunSummary

AlertKind = Literal["dirty", "lag", "dead_letters", "failure", "deadline", "erasure_late"]
MessageFormat = Literal["json", "slack"]
MAX_LISTED = 5
MESSAGE_TYPE = "retention.alert"
RUNBOOK_PAGE = "docs/runbook.md"


@dataclass(frozen=True)
class RunbookStep:
    """The runbook section an alert points at, and the first thing it says to do."""

    heading: str
    first_step: str

    @property
    def anchor(self) -> str:
        return "#" + heading_anchor(self.heading)


# The first step of each runbook section, quoted (docs/runbook.md).
RUNBOOK: dict[str, RunbookStep] = {
    "dirty": RunbookStep(
        "A dirty run",
        "Read what remains and why, before rerunning anything: the run's summary in "
        "retention.runs and its unfinished windows' last_error in retention.windows; then "
        "find the blocker (pg_blocking_pids) and clear delete_window[i] with Downstream.",
    ),
    "outage": RunbookStep(
        "An API outage",
        "Confirm it is the API, not the credentials (a 401/403 streak stops the task with a "
        "message naming the connection): operations by state and the last hour's attempts "
        "by outcome class.",
    ),
    "dead_letters": RunbookStep(
        "Dead letters: replay or not",
        "`python -m retention.cli dead-letters --policy <policy> --failure-class` (counts "
        "per class), then the list of one class, and `python -m retention.cli explain <key "
        "or object id>` for one operation's attempts and replays.",
    ),
    "receiver": RunbookStep(
        "A 410 receiver",
        "Ask the receiver's owner whether the endpoint moved or is gone. Nothing is lost: "
        "the events stay pending in retention.outbox, not dead.",
    ),
    "erasure_late": RunbookStep(
        "An erasure is late",
        "`python -m retention.cli explain --erasure <id>`: its state, what it deleted, the "
        "holds that block it and its error; then the retention__erasure-requests DAG's last "
        "runs.",
    ),
    "slow": RunbookStep(
        "Changing batch size and pool slots mid-flight",
        "Pool slots: Admin → Pools (or `airflow pools set`); the scheduler uses the new "
        "number at once, and more slots start waiting windows. Batch size adapts by itself "
        "towards target_batch_ms.",
    ),
}


def heading_anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@dataclass(frozen=True)
class DeadLetters:
    """Dead operations and events of a policy: new since the run was planned, and in all."""

    new_operations: int = 0
    new_operations_by_class: dict[str, int] = field(default_factory=dict)
    dead_operations: int = 0
    new_events: int = 0
    dead_events: int = 0


@dataclass(frozen=True)
class RunFacts:
    """What a finished run's alerts are decided from (read once, then passed around)."""

    policy: str
    dag_id: str
    run_id: str
    summary: RunSummary | Mapping[str, Any] | None  # retention.runs.summary, None if never written
    failed_tasks: tuple[str, ...] = ()
    lag_hours: float | None = None  # oldest row older than the cutoff: hours since eligible
    dead: DeadLetters = field(default_factory=DeadLetters)
    dry_run: bool = False
    run_url: str | None = None
    # runs of the DAG that Airflow will not start before their logical date, still to come
    # at ``now`` (read from the REST API for the lag alert; empty when not read)
    future_runs: tuple[FutureRun, ...] = ()
    future_runs_total: int = 0  # how many such runs there are (the API counts past its page)
    now: dt.datetime | None = None  # when the facts were read

    @property
    def recorded(self) -> RunSummary | None:
        """The run's summary read typed (reconciled, or partial for a stopped run)."""
        return RunSummary.of(self.summary) if self.summary else None

    @property
    def was_dry_run(self) -> bool:
        """The summary's word on the dry run, or the DAG run's when no summary was written."""
        recorded = self.recorded
        return self.dry_run if recorded is None else recorded.dry_run


@dataclass(frozen=True)
class Alert:
    """One message to one connection: what is wrong, in words and figures."""

    kind: AlertKind
    conn_id: str
    title: str
    text: str
    figures: dict[str, Any]
    runbook: RunbookStep


def decide_alerts(spec: AlertsSpec, facts: RunFacts, *, remote: bool) -> list[Alert]:
    """The alerts a finished run fires under ``spec`` (pure; see the module docs for the rules)."""
    summary = facts.recorded or RunSummary()
    dry_run = facts.was_dry_run
    told_dirty = bool(spec.on_dirty) and summary.status == RunStatus.DIRTY
    alerts: list[Alert] = []
    if spec.on_dirty and told_dirty:
        alerts.append(_dirty(spec.on_dirty, facts, summary))
    if spec.on_failure and facts.failed_tasks and not told_dirty:
        alerts.append(_failure(spec.on_failure, facts, summary, remote=remote))
    if dry_run:
        return alerts
    lag = facts.lag_hours
    if (
        spec.on_lag
        and not told_dirty  # the dirty message carries the lag: one cause, one message
        and spec.lag_minutes is not None
        and lag is not None
        and lag * 60 > spec.lag_minutes
    ):
        alerts.append(_lag(spec.on_lag, spec.lag_minutes, facts, summary, remote=remote))
    dead = facts.dead
    if spec.on_dead_letters and (dead.new_operations or dead.new_events):
        alerts.append(_dead_letters(spec.on_dead_letters, facts))
    return alerts


def _who(facts: RunFacts) -> str:
    return f"{facts.dag_id} run {facts.run_id}"


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def _dirty(conn_id: str, facts: RunFacts, summary: RunSummary) -> Alert:
    left = int(summary.rows_remaining or 0)
    unfinished = list(summary.windows_unfinished)
    dirty_windows = [f"{w.label}: {w.rows_remaining}" for w in summary.dirty_windows]
    problems = list(summary.event_problems)
    parts = [
        f"{_who(facts)} is dirty: {left:,} rows older than cutoff {summary.cutoff} "
        f"remain in {summary.table} ({int(summary.rows_deleted or 0):,} deleted)."
    ]
    if dirty_windows:
        parts.append(f"Rows left in windows: {_listed(dirty_windows)}.")
    if summary.rows_outside_windows:
        parts.append(f"{summary.rows_outside_windows:,} are outside every planned window.")
    if unfinished:
        parts.append(f"Unfinished windows: {_listed(unfinished)}.")
    if problems:
        parts.append("Event delivery: " + "; ".join(problems) + ".")
    partitions = _partition_text(summary)
    if partitions:
        parts.append(partitions)
    figures = {
        "status": RunStatus.DIRTY.value,
        "cutoff": summary.cutoff,
        "rows_deleted": summary.rows_deleted,
        "rows_remaining": left,
        "rows_remaining_in_windows": summary.rows_remaining_in_windows,
        "rows_outside_windows": summary.rows_outside_windows,
        "windows": summary.windows,
        "windows_unfinished": unfinished,
        "event_problems": problems,
        "partition_problems": list(summary.partition_problems),
        "lag_hours": None if facts.lag_hours is None else round(facts.lag_hours, 2),
    }
    only_events = problems and not left and not unfinished and not partitions
    runbook = RUNBOOK["receiver"] if only_events else RUNBOOK["dirty"]
    return Alert(
        "dirty", conn_id, f"Retention {facts.policy}: dirty run", " ".join(parts), figures, runbook
    )


def _partition_text(summary: RunSummary) -> str:
    """The partitions that make a run dirty (reconcile's ``partition_problems``), or ""."""
    problems = list(summary.partition_problems)
    if not problems:
        return ""
    shown = "; ".join(problems[:MAX_LISTED])
    more = len(problems) - MAX_LISTED
    return f"Partitions: {shown}" + (f"; and {more} more." if more > 0 else ".")


def _failure(conn_id: str, facts: RunFacts, summary: RunSummary, *, remote: bool) -> Alert:
    failed = list(facts.failed_tasks)
    status = summary.status
    text = f"{_who(facts)} failed: task(s) {_listed(failed)} failed or could not run."
    text += (
        f" Reconcile recorded the run as {status}." if status else " No run summary was recorded."
    )
    partitions = _partition_text(summary)
    if partitions:
        text += f" {partitions}"
    names = {task.rsplit("_", 1)[0] if task[-1:].isdigit() else task for task in failed}
    if "deliver_events" in names:
        runbook = RUNBOOK["receiver"]
    elif remote and names & {"delete_window", "drain_operations"}:
        runbook = RUNBOOK["outage"]
    else:
        runbook = RUNBOOK["dirty"]
    figures = {
        "failed_tasks": failed,
        "status": str(status) if status else None,
        "dry_run": facts.was_dry_run,
        "rows_deleted": summary.rows_deleted,
        "rows_remaining": summary.rows_remaining,
    }
    return Alert(
        "failure", conn_id, f"Retention {facts.policy}: run failed", text, figures, runbook
    )


def _lag(
    conn_id: str, limit_minutes: float, facts: RunFacts, summary: RunSummary, *, remote: bool
) -> Alert:
    assert facts.lag_hours is not None
    backlog = summary.remote.eligible_rows_by_state if summary.remote else {}
    bound = summary.bound if summary.bound and summary.bound.verdict != "unknown" else None
    text = (
        f"{_who(facts)} left rows behind: the oldest row older than cutoff "
        f"{summary.cutoff} in {summary.table} became eligible "
        f"{facts.lag_hours:.1f} hours ago, more than lag_minutes ({limit_minutes:g}); "
        f"{int(summary.rows_remaining or 0):,} rows are waiting"
        + (f" (by operation state: {backlog})." if backlog else ".")
        + (f" The drain was {bound.says}." if bound is not None else "")
    )
    figures = {
        "lag_hours": round(facts.lag_hours, 2),
        "lag_minutes_limit": limit_minutes,
        "rows_remaining": summary.rows_remaining,
        "status": summary.status and str(summary.status),
        "eligible_rows_by_state": backlog,
    }
    if bound is not None:  # what bounded the drain, and the pool's slots it needs
        figures |= {"bound_by": bound.verdict, "slots_needed": bound.slots_needed}
    if facts.future_runs and facts.now is not None:  # the view's words for such a run
        text += _future_runs_text(facts.future_runs, facts.future_runs_total, facts.now)
        figures["future_runs"] = [
            {"run_id": run.run_id, "logical_date": run.logical_date.isoformat()}
            for run in facts.future_runs
        ]
        figures["future_runs_total"] = max(facts.future_runs_total, len(facts.future_runs))
    # a drain short of slots: the pool's section; any other remote lag starts at the API
    if bound is not None and bound.verdict == "capacity":
        runbook = RUNBOOK["slow"]
    else:
        runbook = RUNBOOK["outage"] if remote else RUNBOOK["dirty"]
    return Alert("lag", conn_id, f"Retention {facts.policy}: lagging", text, figures, runbook)


def _future_runs_text(runs: tuple[FutureRun, ...], total: int, now: dt.datetime) -> str:
    """The runs of the DAG Airflow will not start yet, each with its date and the fix (the
    first few of ``runs``), then how many more there are of ``total``."""
    notes = [future_run_note(run.run_id, run.logical_date, now) for run in runs[:MAX_LISTED]]
    more = max(total, len(runs)) - len(notes)
    return (
        " Not started by Airflow: "
        + " ".join(notes)
        + (f" And {more} more such run(s) of the DAG." if more > 0 else "")
    )


def _dead_letters(conn_id: str, facts: RunFacts) -> Alert:
    dead = facts.dead
    parts = []
    if dead.new_operations:
        classes = ", ".join(f"{k}: {v}" for k, v in sorted(dead.new_operations_by_class.items()))
        parts.append(f"{dead.new_operations} operation(s) went dead ({classes})")
    if dead.new_events:
        parts.append(f"{dead.new_events} event(s) went dead")
    text = (
        f"{_who(facts)}: {' and '.join(parts)} during this run; "
        f"{dead.dead_operations} operation(s) and {dead.dead_events} event(s) are dead in all."
    )
    figures = {
        "new_dead_operations": dead.new_operations,
        "new_dead_operations_by_class": dead.new_operations_by_class,
        "new_dead_events": dead.new_events,
        "dead_operations": dead.dead_operations,
        "dead_events": dead.dead_events,
    }
    return Alert(
        "dead_letters",
        conn_id,
        f"Retention {facts.policy}: dead letters",
        text,
        figures,
        RUNBOOK["dead_letters"],
    )


def deadline_alert(
    conn_id: str,
    *,
    policy: str,
    dag_id: str,
    run_id: str,
    deadline_minutes: float,
    dag_run: dict[str, Any],
    deadline_time: str | None,
    progress: dict[str, Any] | None,
    waiting_for: str | None = None,
    now: dt.datetime | None = None,
) -> Alert:
    """The message of a missed deadline: the run, how late, how far it has come, and
    the run it waits for when another run of the policy holds the run lease (a queued
    backfill run is late because the runs before it are still working, not stuck), or
    that Airflow will not start it before its logical date, still to come at ``now``."""
    state = dag_run.get("state")
    text = (
        f"{dag_id} run {run_id} has not finished {deadline_minutes:g} minutes after it was "
        f"queued (queued {dag_run.get('queued_at')}, deadline {deadline_time}); it is {state}."
    )
    figures: dict[str, Any] = {
        "deadline_minutes": deadline_minutes,
        "queued_at": dag_run.get("queued_at"),
        "deadline_time": deadline_time,
        "state": state,
    }
    if progress:
        text += (
            f" {progress['windows_done']} of {progress['windows']} windows are done, "
            f"{int(progress['rows_deleted']):,} rows deleted of about "
            f"{int(progress['rows_planned']):,} planned"
            + (" (a dry run)." if progress["dry_run"] else ".")
        )
        figures.update(
            windows=progress["windows"],
            windows_done=progress["windows_done"],
            rows_deleted=int(progress["rows_deleted"]),
            rows_planned=int(progress["rows_planned"]),
            dry_run=progress["dry_run"],
        )
    elif (future := _future_date(dag_run, now)) is not None:
        text += " It has not started: " + future_run_note(run_id, future, now or future)
        figures["logical_date_in_future"] = future.isoformat()
    elif waiting_for:
        text += (
            f" It has not started: it waits for run {waiting_for}, which holds the "
            "policy's run lease (runs of one policy never overlap)."
        )
        figures["waiting_for"] = waiting_for
    else:
        text += " Its windows are not planned yet."
    return Alert(
        "deadline", conn_id, f"Retention {policy}: run late", text, figures, RUNBOOK["slow"]
    )


def _future_date(dag_run: dict[str, Any], now: dt.datetime | None) -> dt.datetime | None:
    """The run's logical date (the REST API's ISO 8601 text) when it is after ``now``."""
    text = dag_run.get("logical_date")
    if now is None or not text:
        return None
    try:
        logical = dt.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    if logical.tzinfo is None:
        logical = logical.replace(tzinfo=dt.UTC)
    return logical if logical > now else None


def run_url(base_url: str | None, dag_id: str, run_id: str) -> str | None:
    """The run's page in the Airflow UI, when the API server's base URL is configured."""
    if not base_url:
        return None
    return f"{base_url.rstrip('/')}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def message_body(
    alert: Alert, *, policy: str, dag_id: str, run_id: str, url: str | None, fmt: MessageFormat
) -> dict[str, Any]:
    """The JSON POSTed for an alert: a plain object, or Slack's ``text`` + ``blocks``."""
    runbook = {
        "section": alert.runbook.heading,
        "first_step": alert.runbook.first_step,
        "link": f"{RUNBOOK_PAGE}{alert.runbook.anchor}",
    }
    if fmt == "json":
        return {
            "type": MESSAGE_TYPE,
            "kind": alert.kind,
            "policy": policy,
            "dag_id": dag_id,
            "run_id": run_id,
            "title": alert.title,
            "message": alert.text,
            "figures": alert.figures,
            "runbook": runbook,
            "run_url": url,
        }
    link = f"<{url}|{run_id}>" if url else f"`{run_id}`"
    return {
        "text": f"{alert.title}: {alert.text}",
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": alert.title[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": alert.text[:3000]}},
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"*First step* ({runbook['link']}): {alert.runbook.first_step}"[:3000],
                },
            },
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": f"policy `{policy}` · {dag_id} · run {link}"}
                ],
            },
        ],
    }


def erasure_late_alert(
    spec: AlertsSpec | None, erasure: Mapping[str, Any], now: dt.datetime
) -> Alert | None:
    """The alert of an erasure not done by its deadline (``on_erasure_late``, else
    ``on_failure``), or None: not late, done or blocked by a hold, or no connection to
    tell (pure). A ``failed`` erasure is told at once, whatever its deadline: it is final,
    so it will not be done by then unless someone acts."""
    if spec is None or erasure["state"] not in ("requested", "running", "failed"):
        return None
    failed = erasure["state"] == "failed"
    if erasure["deadline"] >= now and not failed:
        return None
    conn_id = spec.on_erasure_late or spec.on_failure
    if conn_id is None:
        return None
    late_by = max(now - erasure["deadline"], dt.timedelta(0))
    asked = (
        f"Erasure {erasure['erasure_id']} of policy {erasure['policy']!r} "
        f"({erasure['scope']} {erasure['value']!r}, requested by {erasure['requested_by']} "
        f"at {erasure['requested_at']:%Y-%m-%d %H:%M %Z})"
    )
    deadline = f"{erasure['deadline']:%Y-%m-%d %H:%M %Z}"
    text = (
        f"{asked} failed: it will not be done by its deadline {deadline} unless its "
        "cause is fixed and it is requested again."
        if failed
        else f"{asked} is still {erasure['state']} {_hours(late_by)} after its deadline {deadline}."
    ) + (f" Last error: {erasure['error']}" if erasure.get("error") else "")
    return Alert(
        kind="erasure_late",
        conn_id=conn_id,
        title=f"retention: erasure {erasure['erasure_id']} of {erasure['policy']} "
        + ("failed" if failed else "is late"),
        text=text,
        figures={
            "erasure_id": erasure["erasure_id"],
            "state": erasure["state"],
            "deadline": erasure["deadline"].isoformat(),
            "late_seconds": round(late_by.total_seconds()),
            "scope": {erasure["scope"]: erasure["value"]},
        },
        runbook=RUNBOOK["erasure_late"],
    )


def _hours(delta: dt.timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:.1f} hours" if hours < 48 else f"{hours / 24:.1f} days"
