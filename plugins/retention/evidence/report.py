"""Render a run summary as a small aligned table for the task log.

The summary reconcile records is a nested dict; logged as Python it is one
long line that wraps off the screen, with the status somewhere in the middle.
:func:`format_summary` lays it out as ``name  value`` rows, status first (and,
for a run that found its rows already deleted, ``covered_by`` in words next),
numbers with thousands separators (a large nested dict of counters, such
as the drain's, without its zeros), nested dicts as dotted names
(``remote.eligible_rows_by_state``), small flat dicts and lists of dicts
(dirty windows, partitions) and long texts (notes, window keys) as one
readable row each. The values it lays out apart (the first rows, ``covered_by``,
the planned rows' estimate) it reads from the typed :class:`RunSummary`, never
from the JSON by key; every other row is the JSON's own, so keys added to the
summary later show up without a change here. Pure: the unit tests feed it dicts.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any

from retention.summary import RunSummary

MAX_LIST_ITEMS = 10
MAX_INLINE_ITEMS = 6  # a flat dict with more entries than this gets one row per entry
LONG_TEXT = 40  # a list holding a longer string (a note, a window key) gets a row per item
COUNTERS_ITEMS = 12  # a nested dict this large is a pass's counters: its zeros are left out


def format_summary(summary: RunSummary | Mapping[str, Any]) -> str:
    """The summary as aligned ``name  value`` rows, one per line (no trailing newline).

    The rows are the stored JSON's (:meth:`RunSummary.to_json` for a
    :class:`RunSummary`, so the log shows the same names as ``retention.runs.summary``);
    the few rows laid out apart are read from the typed summary's attributes: the status,
    the dry run, the policy and the run id first, then why it deleted nothing
    (``covered_by``, in words), and the planned rows as the estimate they are."""
    typed = RunSummary.of(summary)
    stored = typed.to_json() if isinstance(summary, RunSummary) else dict(summary)
    first = {
        "status": typed.status,
        "dry_run": typed.dry_run,
        "policy": typed.policy,
        "run_id": typed.run_id,
    }
    ordered = {name: value for name, value in first.items() if name in stored}
    covered = typed.covered_by
    if covered is not None and covered.note:  # why it deleted nothing, in words
        ordered["covered_by"] = f"{covered.note} (run id {covered.run_id})"
    ordered |= {name: value for name, value in stored.items() if name not in ordered}
    estimate = "rows_planned_is_estimate"
    if (
        estimate in stored
        and typed.rows_planned_is_estimate
        and isinstance(typed.rows_planned, int)
    ):
        ordered["rows_planned"] = f"~{typed.rows_planned:,} (estimate)"
        del ordered[estimate]
    rows = list(_rows("", ordered))
    if not rows:
        return "(empty summary)"
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}".rstrip() for name, value in rows)


def _rows(prefix: str, data: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for key, value in data.items():
        name = f"{prefix}{key}"
        if _empty(value):
            continue
        if isinstance(value, Mapping):
            shown = value
            if len(value) >= COUNTERS_ITEMS:  # a pass's counters: only what happened
                shown = {k: v for k, v in value.items() if not _nothing(v)}
            if _flat(shown) and len(shown) <= MAX_INLINE_ITEMS:
                yield name, _inline(shown)
            else:
                yield from _rows(f"{name}.", shown)
        elif isinstance(value, list | tuple) and any(_own_row(v) for v in value):
            shown = value[:MAX_LIST_ITEMS]
            for i, item in enumerate(shown):
                text = _inline(item) if isinstance(item, Mapping) else _scalar(item)
                yield (name if i == 0 else ""), text
            if len(value) > len(shown):
                yield "", f"… and {len(value) - len(shown)} more"
        elif isinstance(value, list | tuple):
            yield name, _joined(value)
        else:
            yield name, _scalar(value)


def _own_row(item: Any) -> bool:
    """List items that read better one per row: dicts, and long texts."""
    return isinstance(item, Mapping) or (isinstance(item, str) and len(item) > LONG_TEXT)


def _nothing(value: Any) -> bool:
    """A counter that stayed at zero (or a flag that stayed off), or an empty value."""
    return _empty(value) or (isinstance(value, int | float) and not value)


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, Mapping | list | tuple) and not value)


def _flat(value: Mapping[str, Any]) -> bool:
    return not any(isinstance(v, Mapping | list | tuple) for v in value.values())


def _inline(item: Mapping[str, Any]) -> str:
    """``label ids 1–9, rows_remaining 3``: a label-like value leads, without its name."""
    parts = []
    for key, value in item.items():
        if _empty(value):
            continue
        if isinstance(value, Mapping):
            parts.append(f"{key} {{{_inline(value)}}}")
        elif isinstance(value, list | tuple):
            parts.append(f"{key} [{_joined(value)}]")
        elif key == "label":
            parts.insert(0, _scalar(value))
        else:
            parts.append(f"{key} {_scalar(value)}")
    return ", ".join(parts)


def _joined(values: list[Any] | tuple[Any, ...]) -> str:
    shown = ", ".join(_scalar(v) for v in values[:MAX_LIST_ITEMS])
    more = len(values) - MAX_LIST_ITEMS
    return f"{shown} … and {more} more" if more > 0 else shown


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return _inline(value)
    return " / ".join(line.strip() for line in str(value).splitlines()) or str(value)  # one row
