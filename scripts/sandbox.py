"""Switch the sandbox deletion API's faults while `make airflow` (or `make demo`) serves it.

``make sandbox ARGS="…"`` or ``python scripts/sandbox.py …``, against
``127.0.0.1:$RETENTION_SANDBOX_PORT`` (8765):

- ``reject ID…`` / ``reject --oldest N``: 422 for these objects (dead letters, ``http_422``);
- ``hold ID…`` / ``hold --oldest N``: 403 for these objects (dead letters, ``http_403``);
- ``latency MS``: every delete answers after MS milliseconds;
- ``storm SECONDS``: every delete answers 429 (Retry-After: 1) for that long;
- ``clear``: no faults (the counters stay);
- ``stats``: requests by status, objects deleted, repeats, 429s and the faults on.

The demo's objects are ``asset-0000001`` … in the order of their rows, oldest
first, so ``--oldest N`` names objects the next run will try to delete.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "plugins")]

from retention.paths import load_local_env  # noqa: E402

# Every fault the sandbox knows, switched off (``storm_seconds: 0`` ends a storm now).
NO_FAULTS: dict[str, Any] = {
    "hold": [],
    "reject": [],
    "latency_ms": 0,
    "storm_seconds": 0,
    "deny_all": False,
    "fail_5xx": {},
    "drop_after_apply": [],
    "redirect": {},
    "not_found_all": False,
}


def sandbox_url() -> str:
    return f"http://127.0.0.1:{os.environ.get('RETENTION_SANDBOX_PORT', '8765')}"


def call(path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        sandbox_url() + path, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)
    except urllib.error.URLError as refused:
        sys.exit(
            f"sandbox: no sandbox API at {sandbox_url()} ({refused.reason}); it runs while "
            "`make airflow` (or `python scripts/dev_services.py`) does"
        )


def object_ids(ids: list[str], oldest: int) -> list[str]:
    named = [*ids, *(f"asset-{n:07d}" for n in range(1, oldest + 1))]
    if not named:
        sys.exit("sandbox: name objects (asset-0000001 …) or --oldest N")
    return named


def describe(stats: dict[str, Any]) -> str:
    statuses = Counter(request["status"] for request in stats["requests"])
    config = stats["config"]
    faults = [f"{name} {', '.join(config[name])}" for name in ("reject", "hold") if config[name]]
    if config["latency_ms"]:
        faults.append(f"latency {config['latency_ms']} ms")
    by_status = ", ".join(f"{status}: {n}" for status, n in sorted(statuses.items())) or "none"
    return (
        f"sandbox API at {sandbox_url()}: {len(stats['requests'])} requests ({by_status}), "
        f"{len(stats['effects'])} objects deleted, {stats['repeats']} idempotent repeats, "
        f"{stats['throttled']} answered 429; faults: {'; '.join(faults) or 'none'}"
    )


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    switches = parser.add_subparsers(dest="switch", required=True)
    for name, answer in (("reject", "422"), ("hold", "403")):
        switch = switches.add_parser(name, help=f"{answer} for these objects (dead letters)")
        switch.add_argument("ids", nargs="*", help="object ids, e.g. asset-0000001")
        switch.add_argument("--oldest", type=int, default=0, help="and the N oldest objects")
    switches.add_parser("latency", help="delay every delete").add_argument("ms", type=int)
    switches.add_parser("storm", help="429 for every delete").add_argument("seconds", type=float)
    switches.add_parser("clear", help="no faults")
    switches.add_parser("stats", help="what the API answered so far")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = arguments().parse_args(argv)
    load_local_env()
    if args.switch in ("reject", "hold"):
        current = call("/_sandbox/stats")["config"][args.switch]
        ids = object_ids(args.ids, args.oldest)
        call("/_sandbox/config", {args.switch: sorted({*current, *ids})})
        print(f"sandbox: {args.switch} {', '.join(ids)}")
    elif args.switch == "latency":
        call("/_sandbox/config", {"latency_ms": args.ms})
        print(f"sandbox: every delete answers after {args.ms} ms")
    elif args.switch == "storm":
        call("/_sandbox/config", {"storm_seconds": args.seconds})
        print(f"sandbox: every delete answers 429 for {args.seconds:g} s")
    elif args.switch == "clear":
        call("/_sandbox/config", NO_FAULTS)
        print("sandbox: no faults")
    print(describe(call("/_sandbox/stats")))


if __name__ == "__main__":
    main()
