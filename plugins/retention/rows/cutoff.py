"""The backfill-safe cutoff: a pure function of the run's dates, never of "now".

The anchor is ``data_interval_end``, else ``logical_date``, else ``run_after``
(Airflow 3 manual runs may have no logical date).  Because the cutoff depends
only on the run, rerunning or backfilling a logical date always deletes the
same rows; "now" is used only to refuse a cutoff in the future.
"""

from __future__ import annotations

import datetime as dt
from typing import Any


class CutoffError(ValueError):
    """No usable anchor, or the cutoff would lie in the future."""


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


def compute_cutoff(anchor: dt.datetime, retain_days: int, now: dt.datetime) -> dt.datetime:
    """``anchor - retain_days``; refuses a cutoff later than ``now``."""
    if retain_days <= 0:
        raise CutoffError(f"retain_days must be greater than 0, got {retain_days}")
    cutoff = as_utc(anchor) - dt.timedelta(days=retain_days)
    if cutoff > now:
        raise CutoffError(
            f"cutoff {cutoff.isoformat()} (anchor {anchor.isoformat()} minus {retain_days} days) "
            f"is later than now ({now.isoformat()}); refusing to delete rows that are not yet "
            "old enough. Trigger the run with a logical date that is not in the future."
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
    cutoff = compute_cutoff(anchor, retain_days, now)
    return {
        "cutoff": cutoff.isoformat(),
        "anchor_source": source,
        "anchor": anchor.isoformat(),
        "logical_date": logical_date.isoformat() if logical_date else None,
    }
