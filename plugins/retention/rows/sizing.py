"""How many windows a plan gets, and where their key ranges are cut (pure: no database).

A window is one mapped task, and Airflow spends seconds scheduling each one,
so a window should carry enough work to be worth it: about
``target_window_seconds`` of deleting at the rate this policy's earlier
windows measured.  The planner asks for at least as many windows as the pool
has slots (so the pool is used) when the estimate has rows enough, and never
more than ``max_map_length``.

Cuts come from the key column's equal-depth histogram (``pg_stats``), so
windows hold about the same number of rows even where keys have gaps; keys
beyond the histogram (rows added since the last ``ANALYZE``) are assumed to be
as dense as the histogram's average.  The arithmetic is on offsets from the
range's first key, so keys near the bigint limits cut as well as small ones.
Without a histogram the key range is cut into equal spans.  Either way the
result is an estimate: the delete filters on the timestamp, so a wrong
estimate only makes windows uneven, never wrong.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

DEFAULT_ROWS_PER_SECOND = 20_000.0
"""Assumed delete rate before a policy has finished any window (a cautious figure:
this machine's benchmarks measure 50,000–150,000 rows/s on a quiet server)."""


def rows_per_window(
    window_rows: int | None,
    measured_rows_per_second: float | None,
    target_window_seconds: float,
) -> int:
    """Rows one window should hold: the explicit override, else what fills the target time."""
    if window_rows:
        return window_rows
    rate = measured_rows_per_second or DEFAULT_ROWS_PER_SECOND
    return max(1, round(rate * target_window_seconds))


def window_count(estimated_rows: int, per_window: int, max_windows: int) -> int:
    """Windows for ``estimated_rows``: enough to keep each near ``per_window`` rows (one at
    least, ``max_windows`` at most)."""
    wanted = math.ceil(max(estimated_rows, 1) / max(per_window, 1))
    return max(1, min(wanted, max_windows))


def share_windows(estimates: Sequence[int], total: int) -> list[int]:
    """Split ``total`` windows over groups in proportion to their rows; one each at least.

    ``total`` is raised to ``len(estimates)`` if it is smaller (each group needs a window).
    """
    if not estimates:
        return []
    total = max(total, len(estimates))
    weight = sum(max(e, 1) for e in estimates)
    shares = [1 + (total - len(estimates)) * max(e, 1) // weight for e in estimates]
    left = total - sum(shares)
    by_remainder = sorted(
        range(len(estimates)),
        key=lambda i: -((total - len(estimates)) * max(estimates[i], 1) % weight),
    )
    for i in by_remainder[:left]:
        shares[i] += 1
    return shares


def _knots(span: int, bounds: Sequence[int]) -> tuple[list[float], list[float]]:
    """Piecewise-linear cumulative row mass over key offsets [0, span + 1].

    Offsets are keys minus the range's first key, so that keys near the bigint
    limits keep their precision.  Each histogram bucket holds the same mass
    (1); offsets outside the histogram get its average density.  Returns
    (offsets, cumulative mass).
    """
    cleaned = sorted(set(bounds))
    end = float(span + 1)
    if len(cleaned) < 2:
        return [0.0, end], [0.0, end]
    density = (len(cleaned) - 1) / (cleaned[-1] - cleaned[0])  # mass per key
    keys: list[float] = []
    mass: list[float] = []
    if cleaned[0] > 0:
        keys.append(0.0)
        mass.append(-cleaned[0] * density)
    for i, bound in enumerate(cleaned):
        keys.append(float(bound))
        mass.append(float(i))
    if end > cleaned[-1]:
        keys.append(end)
        mass.append(mass[-1] + (end - cleaned[-1]) * density)
    return keys, mass


def _interpolate(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """y at x on the polyline (xs, ys); clamped at both ends."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x) - 1
    if xs[i + 1] == xs[i]:
        return ys[i]
    return ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i])


def _offsets(first: int, bounds: Sequence[int]) -> list[int]:
    return [b - first for b in bounds]


def cut_points(first: int, last: int, windows: int, bounds: Sequence[int] = ()) -> list[int]:
    """Start keys of ``windows`` windows over [first, last], each with an equal share of rows.

    The first start is ``first``; starts are strictly increasing, so some
    windows are dropped when the range has fewer keys than windows.
    """
    if last < first:
        raise ValueError(f"empty key range [{first}, {last}]")
    span = last - first
    keys, mass = _knots(span, _offsets(first, bounds))
    low = _interpolate(0.0, keys, mass)
    high = _interpolate(float(span + 1), keys, mass)
    starts = [first]
    for j in range(1, windows):
        target = low + (high - low) * j / windows
        # invert the polyline: mass is non-decreasing in keys
        i = max(0, bisect.bisect_left(mass, target) - 1)
        i = min(i, len(keys) - 2)
        part = mass[i + 1] - mass[i]
        at = keys[i] if part == 0 else keys[i] + (keys[i + 1] - keys[i]) * (target - mass[i]) / part
        start = first + min(span, max(0, math.ceil(at)))
        if start > starts[-1]:
            starts.append(start)
    return starts


def mass_share(first: int, last: int, bounds: Sequence[int], lo: int, hi: int) -> float:
    """The share of the rows of [first, last] that lie in [lo, hi] (by the same polyline)."""
    span = last - first
    keys, mass = _knots(span, _offsets(first, bounds))
    whole = _interpolate(float(span + 1), keys, mass) - _interpolate(0.0, keys, mass)
    if whole <= 0:
        return 0.0
    part = _interpolate(float(hi + 1 - first), keys, mass) - _interpolate(
        float(lo - first), keys, mass
    )
    return max(0.0, min(1.0, part / whole))
