"""The run's status: one pure rule over the facts reconcile gathered.

A green run must mean the work was done, so every fact that can make a run
unfinished is listed here and nowhere else; reconcile only gathers the facts
and records what :func:`run_status` decides.  The rule is tested as a table
(``tests/unit/test_run_status.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RunStatus(StrEnum):
    """The values ``retention.runs.status`` takes once a run is reconciled."""

    CLEAN = "clean"
    DIRTY = "dirty"
    BACKLOG = "backlog"
    DRY_RUN = "dry_run"


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


def run_status(facts: RunFacts) -> RunStatus:
    """Decide the run's status.

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
