"""The batch sizer of the row deleter (pure): batches aimed at a time, halved on timeouts."""

from __future__ import annotations

import pytest

from retention.policy.model import BatchTiming
from retention.rows.deleter import BatchSizer


def test_slow_batches_shrink_at_most_20_percent_a_step_towards_the_target() -> None:
    sizer = BatchSizer(start=1000, timing=BatchTiming(target_ms=100))
    sizer.succeeded(elapsed_ms=1000, keys=1000)  # 1 ms per row: 100 rows would be on target
    assert sizer.size == 800
    sizer.succeeded(elapsed_ms=800, keys=800)
    assert sizer.size == 640
    for _ in range(30):
        sizer.succeeded(elapsed_ms=sizer.size * 1.0, keys=sizer.size)
    assert sizer.size == pytest.approx(100, abs=2)


def test_fast_batches_grow_at_most_10_percent_a_step_up_to_the_maximum() -> None:
    sizer = BatchSizer(start=100, timing=BatchTiming(target_ms=100, max_rows=150))
    sizer.succeeded(elapsed_ms=1, keys=100)  # 0.01 ms per row: 10,000 rows would be on target
    assert sizer.size == 110
    for _ in range(10):
        sizer.succeeded(elapsed_ms=1, keys=sizer.size)
    assert sizer.size == 150


def test_the_moving_average_damps_one_outlier() -> None:
    sizer = BatchSizer(start=100, timing=BatchTiming(target_ms=100))
    sizer.succeeded(elapsed_ms=100, keys=100)  # on target
    assert sizer.size == 100
    sizer.succeeded(elapsed_ms=10_000, keys=100)  # one very slow batch
    assert sizer.ms_per_row == pytest.approx(0.7 * 1.0 + 0.3 * 100.0)
    assert sizer.size == 80, "one step down, not a collapse to 1"


def test_a_timeout_halves_below_the_minimum_and_a_single_row_can_grow_again() -> None:
    sizer = BatchSizer(start=40, timing=BatchTiming(target_ms=100, min_rows=20))
    for _ in range(6):
        sizer.timed_out()
    assert sizer.size == 1, "a locked row is isolated whatever min_rows says"
    sizer.succeeded(elapsed_ms=0.1, keys=1)
    assert sizer.size == 20, "the first batch after the lock is back within the bounds"
    sizer.succeeded(elapsed_ms=0.1, keys=20)
    assert sizer.size == 22


def test_size_one_grows_by_at_least_one_row() -> None:
    sizer = BatchSizer(start=1, timing=BatchTiming(target_ms=100))
    sizer.succeeded(elapsed_ms=0.1, keys=1)
    assert sizer.size == 2


def test_the_first_batch_never_exceeds_the_maximum() -> None:
    assert BatchSizer(start=50_000, timing=BatchTiming(max_rows=500)).size == 500
