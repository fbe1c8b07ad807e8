"""The cutoff depends only on the run's dates, and is never later than now − retain_days."""

from __future__ import annotations

import datetime as dt

import pytest

from retention.rows.cutoff import (
    CLOCK_SKEW,
    CutoffError,
    checked_cutoff,
    choose_anchor,
    compute_cutoff,
    latest_cutoff,
    run_cutoff,
)

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


def test_an_anchor_in_the_future_is_refused_so_no_young_row_becomes_eligible() -> None:
    with pytest.raises(CutoffError, match="in the future"):
        compute_cutoff(NOW + dt.timedelta(days=1), 30, NOW)
    with pytest.raises(CutoffError, match="in the future"):
        compute_cutoff(NOW + dt.timedelta(days=20), 30, NOW)
    assert compute_cutoff(NOW - dt.timedelta(seconds=1), 30, NOW) == NOW - dt.timedelta(
        days=30, seconds=1
    )


def test_the_clock_skew_allowance_is_one_minute_and_no_more() -> None:
    assert dt.timedelta(minutes=1) == CLOCK_SKEW
    assert compute_cutoff(NOW + CLOCK_SKEW, 30, NOW) == NOW - dt.timedelta(days=30) + CLOCK_SKEW
    with pytest.raises(CutoffError):
        compute_cutoff(NOW + CLOCK_SKEW + dt.timedelta(microseconds=1), 30, NOW)
    assert latest_cutoff(30, NOW) == NOW - dt.timedelta(days=30) + CLOCK_SKEW


def test_a_future_anchor_message_names_the_anchor_its_date_and_the_fix() -> None:
    typo = dt.datetime(2026, 6, 21, tzinfo=dt.UTC)  # meant 2026-05-21
    with pytest.raises(CutoffError) as refused:
        run_cutoff(
            30,
            data_interval_end=typo + dt.timedelta(days=1),
            logical_date=typo,
            run_after=NOW,
            now=NOW,
        )
    assert str(refused.value) == (
        "the run's anchor data_interval_end resolved to 2026-06-22T00:00:00+00:00 (from the "
        "logical date 2026-06-21T00:00:00+00:00), which is in the future (now is "
        "2026-06-01T00:00:00+00:00): its cutoff 2026-05-23T00:00:00+00:00 would make rows "
        "younger than retain_days (30) eligible. Nothing was deleted; trigger with a logical "
        "date that is not in the future, or leave it empty."
    )


@pytest.mark.parametrize(
    ("cutoff", "refused"),
    [
        ("2026-05-02T00:00:00+00:00", False),  # exactly now − retain_days
        ("2026-05-02T00:01:00+00:00", False),  # within the skew allowance
        ("2026-05-02T00:01:01+00:00", True),
        ("2026-05-22T00:00:00+00:00", True),  # a logical date 20 days ahead
        (dt.datetime(2026, 5, 3, tzinfo=dt.UTC), True),
        ("2026-05-02T00:00:00", True),  # no time zone
        ("yesterday", True),
    ],
)
def test_a_cutoff_read_back_is_checked_against_now_minus_retain_days(
    cutoff: str | dt.datetime, refused: bool
) -> None:
    if refused:
        with pytest.raises(CutoffError, match=r"^policy 'p', task plan_windows: cutoff"):
            checked_cutoff(cutoff, 30, now=NOW, where="policy 'p', task plan_windows")
    else:
        assert checked_cutoff(cutoff, 30, now=NOW, where="x") <= latest_cutoff(30, NOW)


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
        "Nothing was deleted; trigger with a logical date that is not in the future, or leave "
        "it empty."
    )


def test_run_cutoff_prefers_the_data_interval_end_and_records_its_anchor() -> None:
    end = D + dt.timedelta(days=1)
    assert run_cutoff(30, data_interval_end=end, logical_date=D, run_after=NOW, now=NOW) == {
        "cutoff": "2026-01-31T00:00:00+00:00",
        "anchor_source": "data_interval_end",
        "anchor": "2026-03-02T00:00:00+00:00",
        "logical_date": "2026-03-01T00:00:00+00:00",
    }
