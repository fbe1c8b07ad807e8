"""The batch sizer of the row deleter (pure)."""

from __future__ import annotations

from retention.rows.deleter import BatchSizer


def test_batch_sizer_halves_and_grows_back() -> None:
    sizer = BatchSizer(cap=100, fast_ms=10)
    sizer.timed_out()
    sizer.timed_out()
    assert sizer.size == 25
    for _ in range(4):
        sizer.succeeded(1.0)
    assert sizer.size == 50
    sizer.succeeded(50.0)
    for _ in range(3):
        sizer.succeeded(1.0)
    assert sizer.size == 50
    for _ in range(20):
        sizer.succeeded(1.0)
    assert sizer.size == 100
