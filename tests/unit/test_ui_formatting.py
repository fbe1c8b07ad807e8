"""How the Retention view writes durations, numbers, moments and its per-minute bars."""

from __future__ import annotations

import datetime as dt

import pytest

from retention.ui import formatting
from retention.ui.formatting import (
    DASH,
    duration,
    number,
    path_part,
    rate,
    run_state,
    short_id,
    sparkline,
    status,
    when,
)
from retention.ui.queries import LastRun


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, DASH),
        (0, "0 s"),
        (44.6, "45 s"),
        (60, "1 min 0 s"),
        (725, "12 min 5 s"),
        (7200, "2 h 0 min"),
        (11_520, "3 h 12 min"),
        (187_200, "2 d 4 h"),
    ],
)
def test_durations(seconds: float | None, shown: str) -> None:
    assert duration(seconds) == shown


def test_numbers_rates_and_moments() -> None:
    assert (number(None), number(0), number(12_400)) == (DASH, "0", "12,400")
    assert (rate(None), rate(0.1333), rate(250.0), rate(1234.5)) == (DASH, "0.1", "250", "1,234")
    berlin = dt.timezone(dt.timedelta(hours=1))
    moment = dt.datetime(2026, 3, 1, 13, 0, 5, tzinfo=berlin)
    assert when(moment) == "2026-03-01 12:00:05 UTC"
    assert when(None) == DASH


def test_bars_scale_to_the_largest_minute() -> None:
    bars = sparkline([0, 5, 10], width=30, height=20)
    assert [b["h"] for b in bars] == [0, 10, 20]
    assert [b["y"] for b in bars] == [20, 10, 0]
    assert [b["x"] for b in bars] == [0, 10, 20]
    assert sparkline([]) == []
    assert [b["h"] for b in sparkline([0, 0])] == [0, 0]  # an idle hour draws nothing


def test_a_status_column_says_when_nothing_answered() -> None:
    assert (status(422), status(None)) == ("422", "no response")


def a_run(status: str, lease_holder: str | None = None) -> LastRun:
    moment = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    return LastRun(
        "run-9", status, False, moment, None, None, moment, None, None, lease_holder=lease_holder
    )


@pytest.mark.parametrize(
    ("status", "airflow_state", "lease_holder", "shown"),
    [
        ("clean", "running", None, "clean"),  # reconcile wrote it: the ledger's word
        ("dirty", None, None, "dirty"),
        ("planned", "running", None, "running"),
        ("planned", "queued", None, "running"),
        ("planned", None, "run-9", "running"),  # Airflow does not know it; it holds the lease
        ("planned", "failed", None, "failed"),  # stopped before reconcile
        ("planned", None, "run-8", "unfinished"),
        ("planned", "success", None, "unfinished"),
    ],
)
def test_a_run_is_shown_in_the_state_it_is_in(
    status: str, airflow_state: str | None, lease_holder: str | None, shown: str
) -> None:
    assert run_state(a_run(status, lease_holder), airflow_state) == shown


def test_run_ids_are_cut_to_fit_and_quoted_for_a_path() -> None:
    assert short_id("run-1") == "run-1"
    assert short_id("scheduled__2026-03-01T00:00:00+00:00") == "scheduled__2026-03-01…"
    assert short_id("x" * 22) == "x" * 22, "one character more is not worth an ellipsis"
    assert path_part("manual__2026-03-01T00:00:00+00:00") == (
        "manual__2026-03-01T00%3A00%3A00%2B00%3A00"
    )
    assert path_part("a/b") == "a%2Fb"


def test_a_trend_keeps_a_one_minute_spike_and_breaks_where_nothing_waited() -> None:
    day = [0.0] * 1440
    day[700] = 9.0
    drawn = formatting.trend(day, width=240, height=32)
    assert drawn.peak == 9.0
    assert drawn.path.count("M") == 1
    assert drawn.path.count("L") == 239
    assert ",1.0" in drawn.path, "the spike reaches the top although 6 minutes share a column"
    gaps = formatting.trend([1.0] * 10 + [None] * 10 + [2.0] * 10, width=30)
    assert gaps.path.count("M") == 2, "no line across the minutes without a value"
    assert formatting.trend([None, None]).path == ""
    assert formatting.trend([]).peak is None
