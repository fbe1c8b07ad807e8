"""Window labels and widening to the map limit (pure)."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from retention.rows.windows import Window, fit_to_map_limit, merge_factor

CUTOFF = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def window(no: int, tenant: str | None, first: int, last: int, rows: int = 10) -> Window:
    return Window(
        policy="p",
        run_id="r",
        plan_id="r@x",
        window_no=no,
        tenant_scope="one" if tenant else "all",
        tenant=tenant,
        cutoff=CUTOFF,
        first_id=first,
        last_id=last,
        expected_rows=rows,
    )


def test_label_and_xcom_round_trip() -> None:
    w = window(3, "7", 1000, 1999)
    assert w.label == "tenant 7 · ids 1000–1999"
    assert window(0, None, 1, 2).label == "ids 1–2"
    assert Window.from_xcom(w.to_xcom()) == w
    assert w.to_xcom()["window_key"] == "p:r@x:w0003"


def test_fit_keeps_short_plans_unchanged() -> None:
    plan = [window(i, None, i * 10, i * 10 + 9) for i in range(5)]
    assert fit_to_map_limit(plan, 5) == plan


def test_fit_merges_neighbours_within_a_tenant_only() -> None:
    plan = [window(i, "a", i * 10, i * 10 + 9) for i in range(7)]
    plan += [window(7 + i, "b", i * 10 + 5, i * 10 + 8) for i in range(3)]
    fitted = fit_to_map_limit(plan, 4)
    assert len(fitted) <= 4
    assert [w.window_no for w in fitted] == list(range(len(fitted)))
    assert sum(w.expected_rows for w in fitted) == sum(w.expected_rows for w in plan)
    for tenant in ("a", "b"):
        mine = [w for w in fitted if w.tenant == tenant]
        original = [w for w in plan if w.tenant == tenant]
        assert mine[0].first_id == original[0].first_id
        assert mine[-1].last_id == original[-1].last_id
        for left, right in itertools.pairwise(mine):
            assert left.last_id < right.first_id


def test_merge_factor_is_the_smallest_that_fits() -> None:
    assert merge_factor([7, 3], 4) == 3
    assert merge_factor([7, 3], 10) == 1
    with pytest.raises(ValueError, match="more than the map limit"):
        merge_factor([1, 1, 1], 2)


def test_xcom_form_is_plain_json() -> None:
    import json

    data = window(3, "7", 1000, 1999).to_xcom()
    assert json.loads(json.dumps(data)) == data
    assert data["cutoff"] == "2026-01-01T00:00:00+00:00"
    assert data["label"] == "tenant 7 · ids 1000–1999"
    already = {**data, "cutoff": CUTOFF}
    assert Window.from_xcom(already).cutoff is CUTOFF


def test_the_map_limit_itself_is_enough() -> None:
    plan = [window(i, None, i * 10, i * 10 + 9) for i in range(6)]
    assert fit_to_map_limit(plan, 6) is plan
    assert merge_factor([2, 2, 2], 3) == 2, "one window per group is allowed"
    assert merge_factor([5], 2) == 3
