"""Plan requests over a fixed cutoff, as the tests and the benchmarks plan their windows."""

from __future__ import annotations

import datetime as dt

from retention.policy import Policy
from retention.rows.planner import PlanRequest

CUTOFF = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
"""The cutoff of every plan that names none (tests build their rows around it)."""


def request(
    policy: Policy, run_id: str = "run-1", plan_id: str | None = None, **kw: object
) -> PlanRequest:
    """A plan request as ``plan_windows`` gets it from a run, with ``kw`` overriding any field.

    The logical date defaults to the one whose cutoff is :data:`CUTOFF`, so that a
    caller names only what its plan is about.
    """
    values: dict[str, object] = {
        "policy": policy,
        "run_id": run_id,
        "plan_id": plan_id or f"{run_id}@a",
        "cutoff": CUTOFF,
        "anchor_source": "logical_date",
        "logical_date": CUTOFF + dt.timedelta(days=policy.retain_days),
        "window_rows": policy.window_rows,
        "batch_rows": policy.batch_rows,
        "max_windows": 1024,
        "dry_run": False,
    }
    values.update(kw)
    return PlanRequest(**values)  # type: ignore[arg-type]
