"""How many tokens a worker takes in one statement (the take-ahead rule, no database)."""

from __future__ import annotations

import pytest

from retention.queue.limiter import HOLD_SECONDS, tokens_to_take


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
