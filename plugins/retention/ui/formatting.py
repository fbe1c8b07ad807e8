"""How the Retention view writes numbers, times and durations (Jinja2 filters).

Pure functions: an operator reads "3 h 12 min" and "12,400", and the
browser test reads the same text back to compare it with the database.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from retention.runs.status import shown_state

DASH = "–"
SHORT_ID = 21  # characters of a run id a card shows (``scheduled__2026-03-01``…)


def number(value: float | None) -> str:
    """Whole numbers with thousands separators; a missing value is a dash."""
    if value is None:
        return DASH
    return f"{value:,.0f}"


def rate(value: float | None) -> str:
    """A rate: one decimal below 100, whole above; a dash when missing."""
    if value is None:
        return DASH
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def duration(seconds: float | None) -> str:
    """``45 s``, ``12 min 5 s``, ``3 h 12 min``, ``2 d 4 h``; a dash when missing."""
    if seconds is None:
        return DASH
    whole = round(seconds)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def when(value: dt.datetime | None) -> str:
    """A moment in UTC to the second, ``2026-03-01 12:00:05 UTC``; a dash when missing."""
    if value is None:
        return DASH
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def sparkline(values: list[int], width: int = 120, height: int = 24) -> list[dict[str, float]]:
    """Bars (x, y, width, height) of an inline SVG chart, one per value, scaled to the largest."""
    if not values:
        return []
    top = max(values) or 1
    step = width / len(values)
    bars = []
    for index, value in enumerate(values):
        tall = height * value / top
        bars.append({"x": index * step, "y": height - tall, "w": max(step - 0.5, 0.5), "h": tall})
    return bars


@dataclass(frozen=True)
class Trend:
    """A line chart of one figure, drawn server-side as an inline SVG path."""

    path: str  # the ``d`` of the line, in a ``width`` × ``height`` viewBox ('' when empty)
    peak: float | None  # the largest value (None: no value at all)
    width: int
    height: int


def trend(values: Sequence[float | None], width: int = 240, height: int = 32) -> Trend:
    """``values`` (one per minute, oldest first) as a line ``width`` units wide, scaled to
    the largest. Minutes are grouped into ``width`` columns, each drawn at its largest
    value, so a one-minute spike stays visible; a column without any value (no queue)
    breaks the line."""
    known = [v for v in values if v is not None]
    if not known:
        return Trend("", None, width, height)
    top = max(known) or 1.0
    columns = min(width, len(values))
    step = width / max(1, columns - 1)
    parts: list[str] = []
    pen_down = False
    for column in range(columns):
        chunk = values[column * len(values) // columns : (column + 1) * len(values) // columns]
        present = [v for v in chunk if v is not None]
        if not present:
            pen_down = False
            continue
        x = column * step
        y = height - 1 - (height - 2) * max(present) / top
        parts.append(f"{'L' if pen_down else 'M'}{x:.1f},{y:.1f}")
        pen_down = True
    return Trend("".join(parts), max(known), width, height)


def status(code: int | None) -> str:
    """An attempt's answer in a status column: the code, or ``no response`` (a timeout
    or a refused connection has none)."""
    return "no response" if code is None else str(code)


def short_id(value: str, keep: int = SHORT_ID) -> str:
    """A run id cut to fit a card (the page keeps the whole id in a title attribute)."""
    return value if len(value) <= keep + 1 else f"{value[:keep]}…"


def path_part(value: str) -> str:
    """One segment of a URL path (a run id has ``:`` and ``+``), as the alerts' run links."""
    return quote(value, safe="")


def run_state(run: Any, airflow_state: str | None) -> str:
    """What a run is doing now, for its card: :func:`retention.runs.status.shown_state`
    of its stored status, Airflow's state of it, and whether it holds the run lease."""
    return str(shown_state(run.status, airflow_state, holds_lease=run.lease_holder == run.run_id))


FILTERS: dict[str, Callable[..., Any]] = {
    "short_id": short_id,
    "path_part": path_part,
    "run_state": run_state,
    "status": status,
    "number": number,
    "rate": rate,
    "duration": duration,
    "when": when,
    "sparkline": sparkline,
    "trend": trend,
}
