"""Plan windows: immutable key ranges of one tenant scope, and fitting them to the map limit.

A window is what one mapped ``delete_window`` task owns.  Its bounds never
change once recorded, so a retried or rerun task deletes inside exactly the
same range and a re-plan can never move rows between windows.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from retention.rows.target import TenantScope


@dataclass(frozen=True)
class Window:
    """One immutable id window; ``expected_rows`` is the statistics' estimate when planning."""

    policy: str
    run_id: str
    plan_id: str
    window_no: int
    tenant_scope: TenantScope
    tenant: Any
    cutoff: dt.datetime
    first_id: int
    last_id: int
    expected_rows: int

    @property
    def window_key(self) -> str:
        """Stable ledger key: one per window of one recorded plan."""
        return f"{self.policy}:{self.plan_id}:w{self.window_no:04d}"

    @property
    def label(self) -> str:
        """What the grid shows for the mapped task, e.g. ``tenant 7 · ids 1000–1999``."""
        ids = f"ids {self.first_id}–{self.last_id}"
        if self.tenant_scope == "one":
            return f"tenant {self.tenant} · {ids}"
        if self.tenant_scope == "null":
            return f"no tenant · {ids}"
        return ids

    def to_xcom(self) -> dict[str, Any]:
        """A JSON-friendly dict (XCom and ``expand_kwargs``)."""
        data = asdict(self)
        data["cutoff"] = self.cutoff.isoformat()
        data["window_key"] = self.window_key
        data["label"] = self.label
        return data

    @classmethod
    def from_xcom(cls, data: dict[str, Any]) -> Window:
        fields = {k: data[k] for k in cls.__dataclass_fields__}
        cutoff = fields["cutoff"]
        fields["cutoff"] = dt.datetime.fromisoformat(cutoff) if isinstance(cutoff, str) else cutoff
        return cls(**fields)


def merge_factor(group_sizes: list[int], limit: int) -> int:
    """Smallest k such that merging every k adjacent windows per group fits ``limit``."""
    if limit < len([n for n in group_sizes if n > 0]):
        raise ValueError(
            f"{len(group_sizes)} tenant groups need at least that many windows, "
            f"more than the map limit {limit}"
        )
    k = 1
    while sum(math.ceil(n / k) for n in group_sizes) > limit:
        k += 1
    return k


def fit_to_map_limit(windows: list[Window], limit: int) -> list[Window]:
    """Widen windows (merge neighbours of the same tenant scope) until at most ``limit``.

    ``windows`` must be ordered by group then key, as the planner produces them.
    Merging keeps every eligible key covered, because adjacent windows of one
    group are contiguous in that group's key order.
    """
    if len(windows) <= limit:
        return windows
    groups: list[list[Window]] = []
    for window in windows:
        same = groups and (groups[-1][0].tenant_scope, groups[-1][0].tenant) == (
            window.tenant_scope,
            window.tenant,
        )
        if same:
            groups[-1].append(window)
        else:
            groups.append([window])
    k = merge_factor([len(g) for g in groups], limit)
    merged: list[Window] = []
    for group in groups:
        for start in range(0, len(group), k):
            chunk = group[start : start + k]
            merged.append(
                replace(
                    chunk[0],
                    window_no=len(merged),
                    last_id=chunk[-1].last_id,
                    expected_rows=sum(w.expected_rows for w in chunk),
                )
            )
    return merged
