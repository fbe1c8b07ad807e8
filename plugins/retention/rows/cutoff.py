"""The backfill-safe cutoff: a function of the run's dates, bounded by "now".

The anchor is ``data_interval_end``, else ``logical_date``, else ``run_after``
(Airflow 3 manual runs may have no logical date).  Because the cutoff depends
only on the run, rerunning or backfilling a logical date always deletes the
same rows.

"now" bounds it: a cutoff is never later than ``now − retain_days`` (plus
:data:`CLOCK_SKEW` for clocks that disagree), so no row younger than
``retain_days`` is ever eligible.  Airflow 3 accepts any logical date from the
trigger form and the REST API, so a typo of one digit in the year or month
would otherwise move the cutoff weeks forward.  The same rule holds for every
cutoff read back later (an XCom, a window in the ledger): :func:`checked_cutoff`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from retention.summary import day

CLOCK_SKEW = dt.timedelta(minutes=1)
"""How far the anchor may lie ahead of this machine's clock: the scheduler's and a
worker's clocks may differ a little, and a scheduled run's ``data_interval_end``
is the moment it became due."""

FUTURE_FIX = "trigger with a logical date that is not in the future, or leave it empty"
FUTURE_LOG_LINE = "Logical date is in future"  # what Airflow's scheduler logs for such a run


class CutoffError(ValueError):
    """No usable anchor, or a cutoff later than ``now − retain_days``."""


def as_utc(value: dt.datetime) -> dt.datetime:
    """A plain ``datetime`` in UTC (Airflow hands out pendulum objects, whose
    arithmetic with ``datetime.timezone.utc`` can drop the time zone)."""
    return dt.datetime.fromtimestamp(value.timestamp(), tz=dt.UTC)


def choose_anchor(
    data_interval_end: dt.datetime | None,
    logical_date: dt.datetime | None,
    run_after: dt.datetime | None,
) -> tuple[str, dt.datetime]:
    """Return which date anchors the cutoff, and its value (in UTC)."""
    for source, value in (
        ("data_interval_end", data_interval_end),
        ("logical_date", logical_date),
        ("run_after", run_after),
    ):
        if value is not None:
            if value.tzinfo is None:
                raise CutoffError(f"{source} {value.isoformat()} has no time zone")
            return source, as_utc(value)
    raise CutoffError("the run has no data_interval_end, logical_date or run_after")


def latest_cutoff(retain_days: int, now: dt.datetime) -> dt.datetime:
    """The latest cutoff allowed now: ``now − retain_days`` plus the clock-skew allowance."""
    return as_utc(now) - dt.timedelta(days=retain_days) + CLOCK_SKEW


def compute_cutoff(
    anchor: dt.datetime,
    retain_days: int,
    now: dt.datetime,
    *,
    source: str = "anchor",
    logical_date: dt.datetime | None = None,
) -> dt.datetime:
    """``anchor − retain_days``; refuses an anchor in the future (beyond the skew allowance).

    ``anchor ≤ now + skew`` is the same rule as ``cutoff ≤ now − retain_days + skew``.
    """
    if retain_days <= 0:
        raise CutoffError(f"retain_days must be greater than 0, got {retain_days}")
    anchor = as_utc(anchor)
    cutoff = anchor - dt.timedelta(days=retain_days)
    if cutoff > latest_cutoff(retain_days, now):
        given = (
            f" (from the logical date {as_utc(logical_date).isoformat()})"
            if logical_date is not None and source != "logical_date"
            else ""
        )
        raise CutoffError(
            f"the run's anchor {source} resolved to {anchor.isoformat()}{given}, which is "
            f"in the future (now is {as_utc(now).isoformat()}): its cutoff "
            f"{cutoff.isoformat()} would make rows younger than retain_days ({retain_days}) "
            f"eligible. Nothing was deleted; {FUTURE_FIX}."
        )
    return cutoff


def checked_cutoff(
    value: str | dt.datetime, retain_days: int, *, now: dt.datetime, where: str
) -> dt.datetime:
    """A cutoff read back from somewhere (an XCom, ``conf``, a window of the ledger), in UTC,
    refused when it is later than ``now − retain_days``: whoever wrote it, no row younger
    than ``retain_days`` becomes eligible."""
    if isinstance(value, dt.datetime):
        cutoff = value
    else:
        try:
            cutoff = dt.datetime.fromisoformat(str(value))
        except ValueError as bad:
            raise CutoffError(f"{where}: cutoff {str(value)[:60]!r} is not ISO 8601") from bad
    if cutoff.tzinfo is None:
        raise CutoffError(f"{where}: cutoff {cutoff.isoformat()} has no time zone")
    cutoff = as_utc(cutoff)
    limit = latest_cutoff(retain_days, now)
    if cutoff > limit:
        raise CutoffError(
            f"{where}: cutoff {cutoff.isoformat()} is later than now − retain_days "
            f"({(limit - CLOCK_SKEW).isoformat()}, retain_days {retain_days}), so rows that are "
            f"not yet old enough would be eligible. Nothing was deleted; {FUTURE_FIX}."
        )
    return cutoff


def run_cutoff(
    retain_days: int,
    *,
    data_interval_end: dt.datetime | None,
    logical_date: dt.datetime | None,
    run_after: dt.datetime | None,
    now: dt.datetime,
) -> dict[str, Any]:
    """A run's cutoff and where its anchor came from (an XCom-friendly dict)."""
    source, anchor = choose_anchor(data_interval_end, logical_date, run_after)
    cutoff = compute_cutoff(anchor, retain_days, now, source=source, logical_date=logical_date)
    return {
        "cutoff": cutoff.isoformat(),
        "anchor_source": source,
        "anchor": anchor.isoformat(),
        "logical_date": logical_date.isoformat() if logical_date else None,
    }


@dataclass(frozen=True)
class FutureRun:
    """A run of a DAG that Airflow has queued or running with a logical date still to come:
    the scheduler starts none of its tasks before that date."""

    dag_id: str
    run_id: str
    logical_date: dt.datetime
    state: str


def future_run_note(run_id: str, logical_date: dt.datetime, now: dt.datetime) -> str:
    """A DAG run whose logical date is still to come, and the fix, in words.

    Airflow's scheduler starts no task of such a run before its date (it only logs
    "Logical date is in future"), so the run shows "running" with every task "No
    Status" and never reaches ``compute_cutoff``, which would refuse it. Until it is
    marked failed it holds one of the DAG's run slots.
    """
    days = (as_utc(logical_date).date() - as_utc(now).date()).days
    when = f"{days} days ahead" if days > 1 else ("tomorrow" if days == 1 else "later today")
    return (
        f"run {run_id} has the logical date {day(logical_date)} ({when}): Airflow starts "
        f'none of its tasks before then (the scheduler logs "{FUTURE_LOG_LINE}"), so it '
        'shows "running" with every task "No Status". Mark run '
        f"{run_id} failed (in Airflow: open the run, Mark Dag Run as… → Failed), then "
        f"{FUTURE_FIX}."
    )
