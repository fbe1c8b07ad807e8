"""When a run's deletions make the table's statistics stale (the rule, as a table)."""

from __future__ import annotations

import pytest

from retention.rows.statistics import stale_statistics


@pytest.mark.parametrize(
    ("deleted", "estimated", "stale"),
    [
        (0, 1000.0, False),  # nothing deleted (a dry run)
        (0, None, False),
        (100, 1000.0, False),  # exactly a tenth: not more
        (101, 1000.0, True),
        (2437, 666_000.0, False),
        (666_000, 668_437.0, True),  # the demo: nearly all of it
        (1, None, True),  # no statistics yet: any deletion is news to the planner
        (5, 0.0, True),  # the statistics said empty
    ],
)
def test_more_than_a_tenth_of_the_estimated_rows_makes_them_stale(
    deleted: int, estimated: float | None, stale: bool
) -> None:
    assert (stale_statistics(deleted, estimated) is not None) == stale
