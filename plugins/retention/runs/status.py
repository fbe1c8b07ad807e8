"""The run's status: one pure rule over the facts reconcile (or a stop) gathered.

A green run must mean the work was done, so every fact that can make a run
unfinished is listed here and nowhere else; reconcile only gathers the facts
and records what :func:`run_status` decides, and so does the path that closes a
run stopped before its reconcile (``cancelled``; :func:`retention.runs.lease.record_stopped_run`).
What the Retention view shows for a run (its stored status, or, before reconcile,
whether it is running, failed or unfinished) is :func:`shown_state`. Both rules are
tested as tables (``tests/unit/test_run_status.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from retention.summary import RunStatus, status_of

__all__ = [
    "ACTIVE_AIRFLOW_STATES",
    "RemoteFacts",
    "RunFacts",
    "RunStatus",
    "ShownState",
    "StoppedFacts",
    "run_status",
    "shown_state",
]

ACTIVE_AIRFLOW_STATES = ("queued", "running")
"""Airflow's DAG run states of a run that is still working (``DagRunState`` values): the
one spelling the view's rule here, the metadata database's read
(``retention.airflow.access``) and the REST API's (``retention.airflow.dag_runs``) use."""


class ShownState(StrEnum):
    """What the view shows for a run still ``planned`` in the ledger (it has no other
    status yet): Airflow's state of it, or its run lease, says which."""

    RUNNING = "running"
    FAILED = "failed"  # Airflow ended it before reconcile
    UNFINISHED = "unfinished"  # neither Airflow nor the lease knows it (a shell's run)


@dataclass(frozen=True, kw_only=True)
class RemoteFacts:
    """What the operation ledger explains of the rows that remain (remote policies)."""

    unexplained_rows: int
    oldest_overdue_hours: float | None
    max_lag_hours: float | None


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """Everything the status depends on, counted by reconcile after every window ended.

    ``windows_unfinished`` counts windows that failed, were cancelled, are still
    running or never ran; ``partition_problems`` and ``event_problems`` count the
    lines reconcile wrote for each (see ``partition_evidence`` and ``explain_events``);
    ``orphans`` counts the orphans reconcile found in listed children without a constraint.
    ``remote`` is None for a policy without remote deletions. ``rows_remaining``
    counts only rows no legal hold keeps; ``rows_held`` (those a hold keeps) never
    makes a run unfinished: the run is clean when everything not held is gone.
    """

    dry_run: bool
    rows_remaining: int
    rows_held: int = 0
    windows_unfinished: int = 0
    partition_problems: int = 0
    event_problems: int = 0
    orphans: int = 0  # rows of listed children without a constraint whose parent is gone
    remote: RemoteFacts | None = None


@dataclass(frozen=True, kw_only=True)
class StoppedFacts:
    """A run stopped before its reconcile (a SIGTERM, or a DAG run that ended without
    it): how many of its windows still run, and the status the ledger holds now
    (``planned``, or ``cancelled`` when an earlier stop closed it)."""

    windows_running: int
    recorded: RunStatus = RunStatus.PLANNED


def run_status(facts: RunFacts | StoppedFacts) -> RunStatus:
    """Decide the run's status.

    - A run stopped before its reconcile is ``cancelled`` once none of its windows
      still runs; while one does, the run works on and keeps the status it has
      (``planned``), with partial figures. Its reconcile, if it comes, decides again.
    - A dry run deletes nothing, so it is ``dry_run`` whatever remains.
    - A window that did not finish, a partition detached to be dropped and not
      dropped, an event delivery problem, or orphans in a listed child table without a
      foreign key constraint (child rows whose parent is gone) makes the run ``dirty``,
      whatever the table looks like: the work is not done.
    - No eligible rows left but the held ones (a legal hold keeps them): ``clean``.
    - Rows left on a remote policy, each explained by an operation under way and
      none later than ``max_lag_hours``: ``backlog`` (the queue is working on them).
    - Any other rows left: ``dirty``.
    """
    if isinstance(facts, StoppedFacts):
        return facts.recorded if facts.windows_running else RunStatus.CANCELLED
    if facts.dry_run:
        return RunStatus.DRY_RUN
    if (
        facts.windows_unfinished
        or facts.partition_problems
        or facts.event_problems
        or facts.orphans
    ):
        return RunStatus.DIRTY
    if facts.rows_remaining == 0:
        return RunStatus.CLEAN
    remote = facts.remote
    if remote is None or remote.unexplained_rows:
        return RunStatus.DIRTY
    lag, limit = remote.oldest_overdue_hours, remote.max_lag_hours
    if limit is not None and lag is not None and lag > limit:
        return RunStatus.DIRTY
    return RunStatus.BACKLOG


def shown_state(
    stored: RunStatus | str, airflow_state: str | None, *, holds_lease: bool = False
) -> RunStatus | ShownState | str:
    """What a run is doing now, for the view: its stored status once reconcile (or a stop)
    wrote one other than ``planned``; before that Airflow's state of the run, or the
    policy's run lease (``holds_lease``), says whether it is ``running``, or has
    ``failed`` (stopped before reconcile); ``unfinished`` when neither knows (a run
    Airflow does not know, such as one started from a shell, that holds no lease)."""
    status = status_of(stored)  # a newer release's status stays its text, shown as it is
    if status != RunStatus.PLANNED:
        return status
    if airflow_state in ACTIVE_AIRFLOW_STATES or holds_lease:
        return ShownState.RUNNING
    if airflow_state == "failed":
        return ShownState.FAILED
    return ShownState.UNFINISHED
