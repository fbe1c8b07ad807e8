"""Requests counted in time, against the bound of a token bucket (no database, no Airflow)."""

from __future__ import annotations

from collections.abc import Iterable


def max_in_any_interval(times: Iterable[float], seconds: float) -> int:
    """The most of ``times`` that fall in any interval ``[t, t + seconds)``."""
    ordered = sorted(times)
    best, start = 0, 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= seconds:
            start += 1
        best = max(best, end - start + 1)
    return best


def max_in_any_second(times: Iterable[float]) -> int:
    return max_in_any_interval(times, 1.0)


def token_bucket_bound(rate: float, burst: float, seconds: float, late: float = 0.0) -> float:
    """The most requests a bucket of ``rate``/s and ``burst`` admits in ``seconds``.

    ``late``: how long after its token a request may reach the server that
    counts it; a request taken before the interval and arriving inside it adds
    to the count, so the bound widens by ``rate * late``.
    """
    return rate * (seconds + late) + burst


def excess_over_bucket(times: Iterable[float], rate: float, burst: float) -> float:
    """How far ``times`` exceed a bucket of ``rate``/s and ``burst`` in their worst interval.

    The largest ``calls − (rate × width + burst)`` over every interval from one
    time to a later one (both included), so every width at once: positive means
    some interval held more calls than the bucket admits. Counting ``j − i + 1``
    calls in ``[t_i, t_j]`` is ``s_j − s_i + 1 − burst`` with ``s_k = k − rate × t_k``,
    so a running minimum of ``s`` finds the worst pair in one pass.
    """
    worst, lowest = -float(burst), float("inf")
    for index, t in enumerate(sorted(times)):
        s = index - rate * t
        lowest = min(lowest, s)
        worst = max(worst, s - lowest + 1 - burst)
    return worst
