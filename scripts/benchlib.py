"""What every benchmark script shares: repeats in alternating order, min and median,
and a JSON record of the figures with the git SHA under ``.local/bench/``."""

from __future__ import annotations

import datetime as dt
import json
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / ".local" / "bench"


def git_sha() -> str:
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{sha}{'+uncommitted' if dirty else ''}" or "unknown"


def alternate(
    repeat: int, first: Callable[[], Any], second: Callable[[], Any]
) -> tuple[list[Any], list[Any]]:
    """Run two compared measurements ``repeat`` times, swapping their order each time."""
    a: list[Any] = []
    b: list[Any] = []
    for index in range(repeat):
        if index % 2 == 0:
            a.append(first())
            b.append(second())
        else:
            b.append(second())
            a.append(first())
    return a, b


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def show(label: str, values: list[float], unit: str = "", digits: int = 2) -> str:
    s = spread(values)
    runs = ", ".join(f"{v:,.{digits}f}" for v in values)
    return (
        f"{label}: median {s['median']:,.{digits}f}{unit}, min {s['min']:,.{digits}f}{unit} "
        f"(runs: {runs})"
    )


def record(name: str, args: dict[str, Any], figures: dict[str, Any]) -> Path:
    """Write the figures as JSON, with the commit and the arguments; returns the path."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = BENCH_DIR / f"{name}-{stamp}.json"
    document = {
        "benchmark": name,
        "git_sha": git_sha(),
        "measured_at": stamp,
        "args": args,
        "figures": figures,
    }
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"\nfigures written to {path.relative_to(ROOT)}")
    return path
