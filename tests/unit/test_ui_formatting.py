"""How the Retention view writes durations, numbers, moments and its per-minute bars."""

from __future__ import annotations

import datetime as dt

import pytest

from retention.ui import formatting
from retention.ui.formatting import DASH, duration, number, rate, sparkline, status, when


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
