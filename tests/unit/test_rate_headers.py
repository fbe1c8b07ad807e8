"""Reading an API's rate-limit headers (pure): each family into one reading, and every
malformed or contradictory header into a named problem, never a reading."""

from __future__ import annotations

import pytest

from retention.queue.rate_headers import (
    EPOCH_AFTER_SECONDS,
    IETF,
    RATELIMIT,
    X_RATELIMIT,
    QuotaProblem,
    QuotaReading,
    parse_sf_list,
    read_quota,
)

NOW = 1_800_000_000.0  # an epoch second: "now" for epoch resets


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (
            {"RateLimit-Policy": '"default";q=100;w=60', "RateLimit": '"default";r=40;t=12'},
            QuotaReading(IETF, 40, 12.0, 100, 60.0),
        ),
        (
            {"RateLimit": '"default";r=40;t=12'},
            QuotaReading(IETF, 40, 12.0),
        ),
        (
            {
                "ratelimit-policy": "burst;q=10;w=1, daily;q=1000;w=86400",
                "ratelimit": "burst;r=9;t=1, daily;r=500;t=3600",
            },
            QuotaReading(IETF, 500, 3600.0, 1000, 86400.0),
        ),
        (
            {
                "RateLimit-Policy": '"calls";q=100;w=60, "bytes";q=5000;qu="content-bytes";w=1',
                "RateLimit": '"calls";r=50;t=30, "bytes";r=1;t=1;pk=:cGsx:',
            },
            QuotaReading(IETF, 50, 30.0, 100, 60.0),
        ),
        (
            {"RateLimit-Limit": "100", "RateLimit-Remaining": "40", "RateLimit-Reset": "12"},
            QuotaReading(RATELIMIT, 40, 12.0, 100),
        ),
        (
            {
                "RateLimit-Limit": "100, 100;w=60",
                "RateLimit-Remaining": "7",
                "RateLimit-Reset": "3",
            },
            QuotaReading(RATELIMIT, 7, 3.0, 100),
        ),
        (
            {"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "5"},
            QuotaReading(X_RATELIMIT, 0, 5.0, 60),
        ),
        (
            {"X-RateLimit-Remaining": "10", "X-RateLimit-Reset": "2.5"},
            QuotaReading(X_RATELIMIT, 10, 2.5),
        ),
        (
            {
                "X-RateLimit-Limit": "60",
                "X-RateLimit-Remaining": "30",
                "X-RateLimit-Reset": str(int(NOW) + 45),
            },
            QuotaReading(X_RATELIMIT, 30, 45.0, 60),
        ),
        (
            {"X-RateLimit-Remaining": "30", "X-RateLimit-Reset": str(NOW - 0.5)},
            QuotaReading(X_RATELIMIT, 30, 0.0),
        ),
        (
            {
                "RateLimit": '"default";r=40;t=12',
                "X-RateLimit-Limit": "100",
                "X-RateLimit-Remaining": "40",
                "X-RateLimit-Reset": "13",
            },
            QuotaReading(IETF, 40, 12.0),
        ),
    ],
    ids=[
        "ietf",
        "ietf without its policy",
        "ietf: the slower of two quotas",
        "ietf: a quota of bytes counts no calls",
        "ratelimit",
        "ratelimit: a draft-03 limit list",
        "x-ratelimit: nothing left",
        "x-ratelimit: decimal seconds",
        "x-ratelimit: an epoch reset",
        "x-ratelimit: an epoch within a second of now",
        "two families agreeing",
    ],
)
def test_each_family_reads_into_one_reading(headers, expected) -> None:
    assert read_quota(headers, NOW) == expected


@pytest.mark.parametrize(
    ("headers", "family", "words"),
    [
        (
            {"X-RateLimit-Remaining": "lots", "X-RateLimit-Reset": "5"},
            X_RATELIMIT,
            "'lots' is not a whole number",
        ),
        (
            {"X-RateLimit-Remaining": "-1", "X-RateLimit-Reset": "5"},
            X_RATELIMIT,
            "'-1' is not a whole number",
        ),
        (
            {"X-RateLimit-Remaining": "5", "X-RateLimit-Reset": "-5"},
            X_RATELIMIT,
            "'-5' is not a number of seconds",
        ),
        (
            {"X-RateLimit-Remaining": "5", "X-RateLimit-Reset": "soon"},
            X_RATELIMIT,
            "'soon' is not a number",
        ),
        (
            {"X-RateLimit-Remaining": "5, 5", "X-RateLimit-Reset": "5"},
            X_RATELIMIT,
            "not a whole number",
        ),
        (
            {"X-RateLimit-Limit": "40", "X-RateLimit-Remaining": "50", "X-RateLimit-Reset": "5"},
            X_RATELIMIT,
            "X-RateLimit-Remaining 50 is more than X-RateLimit-Limit 40",
        ),
        (
            {"X-RateLimit-Limit": "0", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "5"},
            X_RATELIMIT,
            "a limit of no calls",
        ),
        (
            {"X-RateLimit-Remaining": "5", "X-RateLimit-Reset": str(int(NOW) - 120)},
            X_RATELIMIT,
            "an epoch timestamp 120 s in the past",
        ),
        (
            {"RateLimit-Limit": "10", "RateLimit-Remaining": "11", "RateLimit-Reset": "1"},
            RATELIMIT,
            "RateLimit-Remaining 11 is more than RateLimit-Limit 10",
        ),
        (
            {"RateLimit-Remaining": "1.5", "RateLimit-Reset": "1"},
            RATELIMIT,
            "'1.5' is not a whole number",
        ),
        (
            {"RateLimit": '"default";r=40;t=12', "RateLimit-Policy": '"default";q=30;w=60'},
            IETF,
            "r=40, more than RateLimit-Policy's q=30",
        ),
        ({"RateLimit": '"default";r=-1;t=12'}, IETF, "r=-1 is not a whole number"),
        ({"RateLimit": '"default";r=4.5;t=12'}, IETF, "r=4.5 is not a whole number"),
        ({"RateLimit": '"default";r="many";t=12'}, IETF, "r='many' is not a whole number"),
        ({"RateLimit": '"default";r=4;t=?1'}, IETF, "t=True is not a whole number"),
        ({"RateLimit": '("a" "b");r=4;t=1'}, IETF, "an inner list"),
        ({"RateLimit": '"default;r=4;t=1'}, IETF, "an unterminated string"),
        ({"RateLimit": '"default";r=4;t=1,'}, IETF, "a trailing ','"),
        ({"RateLimit": '"default";r=4;t=1 x'}, IETF, "expected ','"),
        ({"RateLimit": '"default";R=4'}, IETF, "expected a parameter name"),
        ({"RateLimit-Policy": '"default";q=0;w=60'}, IETF, "q=0, a quota of no calls"),
        (
            {"RateLimit-Policy": '"default";q=10;w=0', "RateLimit": '"default";r=1;t=1'},
            IETF,
            "w=0, a window of no time",
        ),
        (
            {
                "RateLimit": '"default";r=40;t=12',
                "X-RateLimit-Remaining": "39",
                "X-RateLimit-Reset": "12",
            },
            X_RATELIMIT,
            "RateLimit says 40 calls left, X-RateLimit-* says 39",
        ),
        (
            {
                "RateLimit": '"default";r=40;t=12',
                "X-RateLimit-Remaining": "40",
                "X-RateLimit-Reset": "30",
            },
            X_RATELIMIT,
            "RateLimit says the quota resets in 12 s, X-RateLimit-* in 30 s",
        ),
        (
            {
                "RateLimit-Policy": '"default";q=100;w=60',
                "RateLimit": '"default";r=40;t=12',
                "RateLimit-Limit": "50",
                "RateLimit-Remaining": "40",
                "RateLimit-Reset": "12",
            },
            RATELIMIT,
            "RateLimit says a limit of 100, RateLimit-* says 50",
        ),
    ],
)
def test_malformed_or_contradictory_headers_are_a_named_problem(headers, family, words) -> None:
    quota = read_quota(headers, NOW)
    assert isinstance(quota, QuotaProblem), quota
    assert quota.family == family
    assert words in str(quota)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Content-Type": "application/json"},
        {"X-RateLimit-Limit": "60"},
        {"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "5"},
        {"RateLimit-Reset": "5"},
        {"RateLimit-Policy": '"default";q=100;w=60'},
        {"RateLimit": '"default";r=40'},
        {"RateLimit-Policy": '"b";q=10;qu="content-bytes"', "RateLimit": '"b";r=4;t=1'},
    ],
    ids=[
        "none",
        "unrelated",
        "a limit alone",
        "remaining without a reset",
        "a reset alone",
        "a policy without its state",
        "no t",
        "a quota that does not count calls",
    ],
)
def test_headers_that_say_too_little_to_pace_by_are_neither_a_reading_nor_a_problem(
    headers,
) -> None:
    assert read_quota(headers, NOW) is None


def test_a_reset_larger_than_a_year_of_seconds_is_an_epoch() -> None:
    year = {"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": str(EPOCH_AFTER_SECONDS)}
    assert read_quota(year, NOW) == QuotaReading(X_RATELIMIT, 1, float(EPOCH_AFTER_SECONDS))
    after = {"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": str(EPOCH_AFTER_SECONDS + 1)}
    assert isinstance(read_quota(after, NOW), QuotaProblem), "an epoch in 1971: in the past"


def test_the_pace_spends_what_is_left_by_the_reset() -> None:
    assert QuotaReading(IETF, 40, 12.0).pace == pytest.approx(40 / 12)
    assert QuotaReading(IETF, 0, 12.0).pace == 0
    assert QuotaReading(IETF, 40, 0.0).pace is None, "the quota resets now: no pace"


def test_structured_field_items_keep_their_parameters() -> None:
    assert parse_sf_list("F", 'a;x=1;y=2.5;z="s\\"q";b=?0;c, "b";k=:YWJj:') == [
        ("a", {"x": 1, "y": 2.5, "z": 's"q', "b": False, "c": True}),
        ("b", {"k": b"YWJj"}),
    ]
    assert parse_sf_list("F", "") == []


def test_a_few_seconds_of_clock_skew_is_not_a_contradiction() -> None:
    """The API's clock runs behind or ahead of ours: an epoch reset a few seconds in the
    past is "now", and an epoch reset beside a delta agrees within the skew; two deltas
    still have to agree to the second."""
    behind = {"X-RateLimit-Remaining": "5", "X-RateLimit-Reset": str(int(NOW) - 10)}
    reading = read_quota(behind, NOW)
    assert isinstance(reading, QuotaReading)
    assert reading.reset_seconds == 0.0
    both = {
        "RateLimit": '"default";r=40;t=12',
        "X-RateLimit-Remaining": "40",
        "X-RateLimit-Reset": str(int(NOW) + 12 + 8),  # our clock 8 s behind the API's
    }
    assert read_quota(both, NOW) == QuotaReading(IETF, 40, 12.0)
    deltas = {**both, "X-RateLimit-Reset": "20"}
    assert isinstance(read_quota(deltas, NOW), QuotaProblem)


def test_a_problem_quotes_at_most_a_bounded_piece_of_the_header() -> None:
    """The problem is stored and shown in the run summary, the view and the CLI: a
    megabyte header must not travel with it."""
    problem = read_quota({"RateLimit-Remaining": "x" * 100_000, "RateLimit-Reset": "1"}, NOW)
    assert isinstance(problem, QuotaProblem)
    assert len(str(problem)) < 200
    assert "xxxx…'" in str(problem)
