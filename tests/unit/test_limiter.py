"""How long tokens taken ahead are kept, how many a worker takes in one statement (the
take-ahead rule), and the pace an API's rate-limit headers set (no database)."""

from __future__ import annotations

import pytest

from retention.queue.limiter import (
    HOLD_SECONDS,
    MAX_HEADER_SECONDS,
    SLOWEST_HEADER_PACE,
    ZERO_RESET_SECONDS,
    HeaderPace,
    header_pace,
    hold_seconds,
    tokens_to_take,
)


@pytest.mark.parametrize(
    ("upcoming", "rate", "pace", "expected", "why"),
    [
        (50, 10_000, None, 1, "no pace measured yet"),
        (1, 10_000, 0.001, 1, "one call lined up"),
        (50, 10_000, 0.0021, 23, "the worker's pace: 50 ms / 2.1 ms"),
        (50, 10_000, 0.0001, 50, "no more than the calls lined up"),
        (50, 400, 0.0001, 20, "what the scope earns in 50 ms at 400/s"),
        (50, 39, 0.0001, 1, "under 40/s the scope earns less than two tokens in 50 ms"),
        (50, 10_000, 0.03, 1, "a call slower than 25 ms: one token at a time"),
        (50, 10_000, 0.0, 50, "a zero pace is not a division by zero"),
    ],
)
def test_tokens_to_take(upcoming, rate, pace, expected, why) -> None:
    assert tokens_to_take(upcoming, rate, pace) == expected, why


def test_a_take_never_outlasts_the_hold_at_the_scope_rate() -> None:
    for rate in (1, 20, 40, 100, 1000, 50_000):
        taken = tokens_to_take(1000, rate, 1e-6)
        assert taken <= max(1, rate * HOLD_SECONDS)


YEAR = 365 * 86_400.0


@pytest.mark.parametrize(
    ("remaining", "reset", "ceiling", "expected", "why"),
    [
        (40, 10.0, 50.0, HeaderPace(4.0, 10.0), "what is left, spent by the reset"),
        (4000, 10.0, 50.0, HeaderPace(50.0, 10.0), "never above the configured rate"),
        (40, 10.0, None, HeaderPace(4.0, 10.0), "no ceiling known"),
        (0, 10.0, 50.0, HeaderPace(None, 10.0), "none left: closed until the reset"),
        (5, 0.0, 50.0, HeaderPace(5 / ZERO_RESET_SECONDS, ZERO_RESET_SECONDS), "reset now"),
        (1, YEAR, 50.0, HeaderPace(SLOWEST_HEADER_PACE, MAX_HEADER_SECONDS), "a year away"),
        (0, YEAR, 50.0, HeaderPace(None, MAX_HEADER_SECONDS), "closed a year: capped"),
        (86_400, 86_400.0, 50.0, HeaderPace(1.0, MAX_HEADER_SECONDS), "a daily quota's pace"),
        (3_000_000_000, 60.0, 50.0, HeaderPace(50.0, 60.0), "beyond a 32-bit integer"),
        (5, 1e15, 50.0, HeaderPace(SLOWEST_HEADER_PACE, MAX_HEADER_SECONDS), "far epoch"),
        (1, YEAR, 1e-5, HeaderPace(1e-5, MAX_HEADER_SECONDS), "a ceiling below the floor"),
    ],
)
def test_header_pace(remaining, reset, ceiling, expected, why) -> None:
    assert header_pace(remaining, reset, ceiling) == expected, why


@pytest.mark.parametrize(
    ("rate", "burst", "expected", "why"),
    [
        (100, 20, 0.05, "5 tokens in 50 ms: within half the burst"),
        (400, 20, 0.025, "20 tokens in 50 ms: cut to half the burst, 10"),
        (100_000, 100_000, 0.05, "the ledger's bench: 5,000 tokens held at most"),
        (100, 4, 0.02, "two tokens: the smallest reserve worth a take of two"),
        (100, 3, 0.0, "half a burst of 3 is under two tokens: no take-ahead"),
        (39, 100, 0.0, "under 40/s the scope earns less than two tokens in 50 ms"),
    ],
)
def test_hold_seconds(rate, burst, expected, why) -> None:
    assert hold_seconds(rate, burst) == pytest.approx(expected), why


def test_the_reserve_leaves_half_the_burst_and_allows_takes_of_two() -> None:
    """The bucket holds ``burst − rate × hold``: never under half the burst (so at least one
    token), and a hold is only kept where it earns two tokens or more."""
    for rate in (0.5, 1, 20, 39, 40, 100, 400, 1000, 50_000, 100_000):
        for burst in (1, 2, 3, 4, 5, 20, 100, 100_000):
            hold = hold_seconds(rate, burst)
            assert 0 <= hold <= HOLD_SECONDS
            assert rate * hold <= burst / 2 + 1e-9, (rate, burst)
            assert hold == 0 or rate * hold >= 2 - 1e-9, (rate, burst)
            assert tokens_to_take(1000, rate, 1e-6, hold) <= max(1, rate * hold + 1e-9)
