"""The sandbox API says its real limit in each family of rate-limit headers, and what it
says reads back, through the limiter's own parser, as the window it really keeps."""

from __future__ import annotations

import time

import pytest

from devtools.sandbox_api import HEADER_FAMILIES, SandboxState
from retention.queue.rate_headers import QuotaReading, read_quota


@pytest.mark.parametrize("family", HEADER_FAMILIES)
def test_each_family_reads_back_as_the_window_the_sandbox_keeps(family: str) -> None:
    state = SandboxState(rate=10, window_seconds=2, headers=family)
    taken = [state.take_token() for _ in range(23)]
    assert taken[:20] == [0.0] * 20, "20 calls a window: rate × window_seconds"
    assert all(wait > 0 for wait in taken[20:]), "then 429 until the window ends"
    quota = read_quota(state.limit_headers(), time.time())
    assert isinstance(quota, QuotaReading), quota
    assert (quota.limit, quota.remaining) == (20, 0)
    assert 0 < quota.reset_seconds <= 2 + 1, "the window's end, in whole seconds rounded up"
    assert quota.reset_seconds >= state.window_end - time.monotonic(), "never before it"


def test_a_token_bucket_says_its_burst_and_when_it_is_full_again() -> None:
    state = SandboxState(rate=4, burst=8, headers="x-ratelimit")
    for _ in range(3):
        state.take_token()
    quota = read_quota(state.limit_headers(), time.time())
    assert isinstance(quota, QuotaReading)
    assert (quota.limit, quota.remaining, quota.reset_seconds) == (8, 5, 1.0)


def test_no_family_sends_only_the_extra_headers_and_a_wrong_one_is_refused() -> None:
    state = SandboxState(extra_headers={"X-RateLimit-Remaining": "5"})
    assert state.limit_headers() == {"X-RateLimit-Remaining": "5"}
    with pytest.raises(ValueError, match="headers must be one of"):
        SandboxState(headers="github")
