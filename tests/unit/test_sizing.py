"""Window counts and cut points (pure): how a plan's estimate becomes windows."""

from __future__ import annotations

import pytest

from retention.rows.sizing import (
    DEFAULT_ROWS_PER_SECOND,
    cut_points,
    mass_share,
    rows_per_window,
    share_windows,
    window_count,
)


def test_rows_per_window_prefers_the_override_then_the_measured_rate() -> None:
    assert rows_per_window(5_000, 1_000.0, 30) == 5_000
    assert rows_per_window(None, 1_000.0, 30) == 30_000
    assert rows_per_window(None, None, 30) == DEFAULT_ROWS_PER_SECOND * 30
    assert rows_per_window(None, 0.001, 1) == 1, "never zero rows per window"


@pytest.mark.parametrize(
    ("estimated", "per_window", "limit", "expected"),
    [
        (0, 1000, 1024, 1),
        (1, 1000, 1024, 1),
        (1000, 1000, 1024, 1),
        (1001, 1000, 1024, 2),
        (10_000_000, 1000, 1024, 1024),
        (5, 1, 3, 3),
    ],
)
def test_window_count(estimated: int, per_window: int, limit: int, expected: int) -> None:
    assert window_count(estimated, per_window, limit) == expected


@pytest.mark.parametrize(
    ("estimates", "total", "expected"),
    [
        ([], 4, []),
        ([100], 4, [4]),
        ([300, 100], 4, [3, 1]),
        ([950, 25, 25], 4, [2, 1, 1]),
        ([10, 10, 10], 2, [1, 1, 1]),
        ([0, 0], 5, [3, 2]),
        ([7, 5, 1], 10, [5, 4, 1]),
    ],
)
def test_share_windows(estimates: list[int], total: int, expected: list[int]) -> None:
    shares = share_windows(estimates, total)
    assert shares == expected
    assert sum(shares) == max(total, len(estimates)) or not estimates


def test_equal_spans_without_a_histogram() -> None:
    assert cut_points(1, 100, 4) == [1, 26, 51, 76]
    assert cut_points(1, 3, 10) == [1, 2, 3], "never more windows than keys"
    assert cut_points(5, 5, 3) == [5]


def test_histogram_cuts_put_equal_rows_on_each_side_of_a_gap() -> None:
    # half the rows at keys 1..1000, half at 1_000_001..1_001_000: an even histogram
    bounds = [1, 250, 500, 750, 1000, 1_000_250, 1_000_500, 1_000_750, 1_001_000]
    starts = cut_points(1, 1_001_000, 2, bounds)
    assert starts[0] == 1
    assert 1000 <= starts[1] <= 1_000_001, "the cut falls in the gap, not in its middle"
    four = cut_points(1, 1_001_000, 4, bounds)
    assert four[1] == pytest.approx(500, abs=1)
    assert four[3] == pytest.approx(1_000_500, abs=1)


def test_keys_past_the_histogram_count_at_its_average_density() -> None:
    bounds = [0, 100, 200, 300, 400]  # 100 keys per bucket
    starts = cut_points(0, 799, 2, bounds)
    assert starts == [0, 400], "rows added since ANALYZE are as dense as the rest"


def test_cut_points_refuse_an_empty_range() -> None:
    with pytest.raises(ValueError, match=r"empty key range \[5, 4\]"):
        cut_points(5, 4, 2)


def test_mass_share_splits_the_estimate() -> None:
    assert mass_share(1, 100, [], 1, 50) == pytest.approx(0.5)
    assert mass_share(1, 100, [], 1, 100) == pytest.approx(1.0)
    bounds = [1, 250, 500, 750, 1000, 1_000_250, 1_000_500, 1_000_750, 1_001_000]
    assert mass_share(1, 1_001_000, bounds, 1, 1000) == pytest.approx(0.5, abs=0.01)
    # the bucket that straddles the gap spreads its eighth of the rows across it
    assert mass_share(1, 1_001_000, bounds, 2000, 999_999) == pytest.approx(1 / 8, abs=0.01)


def test_keys_near_the_bigint_limits_cut_as_well_as_small_ones() -> None:
    assert cut_points(2**62, 2**62 + 99, 10) == [2**62 + 10 * i for i in range(10)]
    top = 2**63 - 1
    starts = cut_points(top - 999, top, 8)
    assert len(starts) == 8
    assert starts[-1] == top - 999 + 875
    assert mass_share(top - 999, top, [], top - 499, top) == pytest.approx(0.5)
