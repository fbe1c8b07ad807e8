"""The cutoff depends only on the run's dates, and never lies in the future."""

from __future__ import annotations

import datetime as dt

import pytest

from retention.rows.cutoff import CutoffError, choose_anchor, compute_cutoff, run_cutoff

D = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def test_anchor_prefers_data_interval_end_then_logical_date_then_run_after() -> None:
    later = D + dt.timedelta(days=1)
    assert choose_anchor(later, D, NOW) == ("data_interval_end", later)
    assert choose_anchor(None, D, NOW) == ("logical_date", D)
    assert choose_anchor(None, None, NOW) == ("run_after", NOW)


def test_no_anchor_and_naive_anchor_are_refused() -> None:
    with pytest.raises(CutoffError, match="no data_interval_end"):
        choose_anchor(None, None, None)
    with pytest.raises(CutoffError, match="no time zone"):
        choose_anchor(None, dt.datetime(2026, 1, 1), None)


def test_cutoff_is_anchor_minus_retain_days_in_utc() -> None:
    anchor = dt.datetime(2026, 3, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=5)))
    assert compute_cutoff(anchor, 30, NOW) == dt.datetime(2026, 1, 30, tzinfo=dt.UTC)


def test_same_logical_date_gives_same_cutoff_whatever_now_is() -> None:
    first = run_cutoff(30, data_interval_end=None, logical_date=D, run_after=NOW, now=NOW)
    later_now = NOW + dt.timedelta(days=200)
    again = run_cutoff(
        30, data_interval_end=None, logical_date=D, run_after=later_now, now=later_now
    )
    assert first == again
    assert first["cutoff"] == "2026-01-30T00:00:00+00:00"
    assert first["anchor_source"] == "logical_date"


def test_manual_run_without_logical_date_uses_run_after() -> None:
    result = run_cutoff(30, data_interval_end=None, logical_date=None, run_after=D, now=NOW)
    assert result["anchor_source"] == "run_after"
    assert result["logical_date"] is None


def test_future_cutoff_is_refused() -> None:
    far = NOW + dt.timedelta(days=40)
    with pytest.raises(CutoffError, match="later than now"):
        compute_cutoff(far, 30, NOW)
    assert compute_cutoff(NOW + dt.timedelta(days=30), 30, NOW) == NOW


def test_pendulum_anchor_from_airflow_keeps_its_time_zone() -> None:
    import pendulum

    _, anchor = choose_anchor(None, pendulum.datetime(2026, 3, 1, tz="UTC"), None)
    cutoff = compute_cutoff(anchor, 30, NOW)
    assert cutoff == dt.datetime(2026, 1, 30, tzinfo=dt.UTC)
    assert cutoff.tzinfo is not None


def test_cutoff_messages_and_the_smallest_retention() -> None:
    with pytest.raises(CutoffError) as none:
        choose_anchor(None, None, None)
    assert str(none.value) == "the run has no data_interval_end, logical_date or run_after"
    with pytest.raises(CutoffError) as zero:
        compute_cutoff(D, 0, NOW)
    assert str(zero.value) == "retain_days must be greater than 0, got 0"
    assert compute_cutoff(D, 1, NOW) == D - dt.timedelta(days=1)
    with pytest.raises(CutoffError) as future:
        compute_cutoff(NOW + dt.timedelta(days=31), 30, NOW)
    assert str(future.value).endswith(
        "refusing to delete rows that are not yet old enough. Trigger the run with a logical "
        "date that is not in the future."
    )


def test_run_cutoff_prefers_the_data_interval_end_and_records_its_anchor() -> None:
    end = D + dt.timedelta(days=1)
    assert run_cutoff(30, data_interval_end=end, logical_date=D, run_after=NOW, now=NOW) == {
        "cutoff": "2026-01-31T00:00:00+00:00",
        "anchor_source": "data_interval_end",
        "anchor": "2026-03-02T00:00:00+00:00",
        "logical_date": "2026-03-01T00:00:00+00:00",
    }
