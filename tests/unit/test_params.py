"""Trigger-form params: bounded in the form and checked again in the task."""

from __future__ import annotations

import pytest

from retention.policy.params import ParamError, RunSettings, run_settings
from tests.support.policies import make_policy


def test_params_default_to_the_policy() -> None:
    policy = make_policy("p", window_rows=1000, batch_rows=100)
    assert run_settings(policy, {}) == RunSettings(False, 1000, 100)
    assert run_settings(policy, {"dry_run": True, "window_rows": 50, "batch_rows": 50}) == (
        RunSettings(True, 50, 50)
    )


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"window_rows": 10_000_001}, "'window_rows' must be a whole number in [1, 10000000]"),
        ({"batch_rows": 100_001, "window_rows": 200_000}, "'batch_rows' must be a whole number"),
        ({"window_rows": -1}, "'window_rows'"),
        ({"window_rows": True}, "'window_rows'"),
        ({"batch_rows": 500, "window_rows": 100}, "'batch_rows' (500) is larger than window_rows"),
        ({"dry_run": "yes"}, "'dry_run' must be true or false"),
    ],
)
def test_out_of_bounds_params_are_refused_by_name(params: dict, words: str) -> None:
    with pytest.raises(ParamError) as refused:
        run_settings(make_policy("p", window_rows=1000, batch_rows=100), params)
    assert words in str(refused.value)


def test_the_bounds_themselves_are_accepted() -> None:
    policy = make_policy("p", window_rows=1000, batch_rows=100)
    assert run_settings(policy, {"window_rows": 1, "batch_rows": 1}).window_rows == 1
    wide = run_settings(policy, {"window_rows": 10_000_000, "batch_rows": 100_000})
    assert (wide.window_rows, wide.batch_rows) == (10_000_000, 100_000)


def test_a_first_batch_outside_the_policys_batch_bounds_is_refused() -> None:
    policy = make_policy("p", batch_rows=100, min_batch_rows=50, max_batch_rows=500)
    with pytest.raises(ParamError) as refused:
        run_settings(policy, {"batch_rows": 50_000})
    assert str(refused.value) == (
        "param 'batch_rows' (50000) is outside the policy's [min_batch_rows, max_batch_rows] = "
        "[50, 500] for policy 'p'"
    )
    with pytest.raises(ParamError, match=r"param 'batch_rows' \(10\) is outside"):
        run_settings(policy, {"batch_rows": 10})
    assert run_settings(policy, {"batch_rows": 500}).batch_rows == 500


def test_window_rows_may_be_left_to_the_policys_time_target() -> None:
    policy = make_policy("p", window_rows=None, batch_rows=100)
    assert run_settings(policy, {}).window_rows is None
    assert run_settings(policy, {"window_rows": 5000}).window_rows == 5000


def test_the_trigger_form_declares_exactly_what_run_settings_resolves() -> None:
    from dataclasses import fields

    from retention.policy.params import run_params

    policy = make_policy("p", window_rows=1000, batch_rows=100)
    form = run_params(policy)
    assert set(form) == {field.name for field in fields(RunSettings)}
    defaults = {name: spec["default"] for name, spec in form.items()}
    assert run_settings(policy, defaults) == RunSettings(False, 1000, 100), (
        "the form's defaults run the policy as written"
    )
    wide = make_policy("w", window_rows=None, min_batch_rows=1, max_batch_rows=100_000)
    (low_w, high_w), (low_b, high_b) = (
        (run_params(wide)[name]["minimum"], run_params(wide)[name]["maximum"])
        for name in ("window_rows", "batch_rows")
    )
    assert run_settings(wide, {"window_rows": low_w, "batch_rows": low_b})
    assert run_settings(wide, {"window_rows": high_w, "batch_rows": high_b})
    with pytest.raises(ParamError, match="'window_rows'"):
        run_settings(wide, {"window_rows": high_w + 1})
    with pytest.raises(ParamError, match="'batch_rows'"):
        run_settings(wide, {"batch_rows": high_b + 1})
