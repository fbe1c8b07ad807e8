"""A run's choices: the policy's sizes unless the trigger form overrides them.

:func:`run_params` declares the trigger form (the DAG's ``params``, one JSON
Schema per param, each made a ``Param`` by the Airflow layer) and
:func:`run_settings` resolves what a run was given. The form bounds each value;
the check runs again in the task, because ``airflow dags trigger --conf`` and
the REST API can skip the form. Both sit here so that a param is added, bounded
and resolved in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retention.policy.model import BATCH_ROWS_BOUNDS, WINDOW_ROWS_BOUNDS, Policy


class ParamError(ValueError):
    """A trigger param out of bounds; the message names the param."""


@dataclass(frozen=True)
class RunSettings:
    """What one run does: delete or only count, and its window and batch sizes."""

    dry_run: bool
    window_rows: int | None  # None: windows sized by the policy's target_window_seconds
    batch_rows: int


def run_params(policy: Policy) -> dict[str, dict[str, Any]]:
    """The trigger form of the policy's DAG: for each param of :class:`RunSettings`, its
    default (empty: the policy's value), its JSON Schema bounds and the text the form shows.

    Plain dicts, so this layer needs no Airflow: ``Param(**spec)`` makes each a ``Param``.
    """
    window = f"about {policy.target_window_seconds:g} s of work each" + (
        f" (policy: {policy.window_rows})." if policy.window_rows else "."
    )
    return {
        "dry_run": {
            "default": False,
            "type": "boolean",
            "description": "Plan and count every window; delete nothing.",
        },
        "window_rows": {
            "default": None,
            "type": ["null", "integer"],
            "minimum": WINDOW_ROWS_BOUNDS[0],
            "maximum": WINDOW_ROWS_BOUNDS[1],
            "description": f"Eligible rows per window (an estimate); empty: sized to {window}",
        },
        "batch_rows": {
            "default": None,
            "type": ["null", "integer"],
            "minimum": BATCH_ROWS_BOUNDS[0],
            "maximum": BATCH_ROWS_BOUNDS[1],
            "description": "Rows in the first delete transaction of each window; later ones "
            f"are sized to {policy.target_batch_ms:g} ms (policy: {policy.batch_rows}).",
        },
    }


def run_settings(policy: Policy, params: dict[str, Any]) -> RunSettings:
    """Resolve trigger-form params against the policy; errors name the param."""
    window_rows = params.get("window_rows") or policy.window_rows
    batch_rows = params.get("batch_rows") or policy.batch_rows
    for name, value, (low, high) in (
        ("window_rows", window_rows, WINDOW_ROWS_BOUNDS),
        ("batch_rows", batch_rows, BATCH_ROWS_BOUNDS),
    ):
        if value is None and name == "window_rows":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ParamError(
                f"param {name!r} must be a whole number in [{low}, {high}], got {value!r}"
            )
    if not policy.min_batch_rows <= batch_rows <= policy.max_batch_rows:
        raise ParamError(
            f"param 'batch_rows' ({batch_rows}) is outside the policy's [min_batch_rows, "
            f"max_batch_rows] = [{policy.min_batch_rows}, {policy.max_batch_rows}] "
            f"for policy {policy.name!r}"
        )
    if window_rows is not None and batch_rows > window_rows:
        raise ParamError(
            f"param 'batch_rows' ({batch_rows}) is larger than window_rows ({window_rows}) "
            f"for policy {policy.name!r}"
        )
    dry_run = params.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ParamError(f"param 'dry_run' must be true or false, got {dry_run!r}")
    return RunSettings(dry_run, window_rows, batch_rows)
