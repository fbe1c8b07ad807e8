"""A small, real deletion API for the demo, the tests and the benchmarks.

``DELETE <any path>`` deletes the object named by the path, with:

- a token-bucket rate limit (``rate`` per second, ``burst``) answering 429 with
  ``Retry-After`` (whole seconds, at least 1); or, with ``window_seconds``, a
  fixed-window limit of ``rate × window_seconds`` calls per window (429 with
  ``Retry-After`` until the window ends);
- rate-limit headers on every answer, computed from that real bucket or window
  (``headers``): ``"ietf"`` (``RateLimit-Policy`` and ``RateLimit``),
  ``"ratelimit"`` (``RateLimit-Limit``/``-Remaining``/``-Reset``), ``"x-ratelimit"``
  (``X-RateLimit-*``, reset in seconds) or ``"x-ratelimit-epoch"`` (reset as an epoch
  timestamp). The limit is the window's calls (the bucket's burst), what remains is
  what is left of it, and the reset is when the window ends (when the bucket is full
  again), in whole seconds rounded up: never announced before it happens.
  ``extra_headers`` are added to every answer as given (malformed ones, for tests);
- idempotency keys (header ``Idempotency-Key``): a repeat returns the first
  result and is counted as a repeat, never as a second effect;
- faults: ``drop_after_apply`` (object ids whose first delete is applied and
  then the connection is dropped without an answer), ``fail_5xx`` (ids that get
  503 without Retry-After, a number of times), ``latency_ms``, ``hold`` (ids
  answering 403), ``locked`` (ids answering 423: the remote side holds them),
  ``reject`` (ids answering 422), ``deny_all`` (401 for all),
  ``storm_seconds`` (every request gets 429 with Retry-After: 1 for that long),
  ``rate_limited`` (ids that get 429 with ``Retry-After: <retry_after_seconds>``, default
  1, a number of times, before anything is applied: one resource's own rate limit),
  ``redirect`` (object id -> URL answered with 307 and that Location),
  ``not_found_all`` (every delete answers 404, as a wrong endpoint template would).

Derivatives: a path ending in one of ``derivatives`` (default ``thumbnails`` and
``transcodes``), such as ``/v1/assets/obj-7/thumbnails``, or naming one before the
id (``/v1/transcodes/obj-7``), deletes the derivative ``obj-7/thumbnails`` (or
``obj-7/transcodes``): a resource of its own, with its own effects, and its own
faults, named the same way (``fail_5xx={"obj-7/thumbnails": 1}``);
``not_found_derivatives`` (names of derivatives that answer 404 to everything,
as a derivative's wrong endpoint template would).

Admin endpoints (JSON): ``GET /_sandbox/stats``, ``POST /_sandbox/config``,
``POST /_sandbox/reset``.  Stats include every request's time and status, the
number of effects per object, repeats, 429s and the peak of concurrent requests.

Run it alone with ``python -m devtools.sandbox_api --port 8765 --rate 20``.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULTS: dict[str, Any] = {
    "rate": 1000.0,
    "burst": None,
    "latency_ms": 0,
    "drop_after_apply": [],
    "fail_5xx": {},
    "rate_limited": {},
    "retry_after_seconds": 1,
    "hold": [],
    "locked": [],
    "reject": [],
    "deny_all": False,
    "redirect": {},
    "not_found_all": False,
    "derivatives": ["thumbnails", "transcodes"],
    "not_found_derivatives": [],
    "window_seconds": None,
    "headers": None,
    "extra_headers": {},
}
HEADER_FAMILIES = ("ietf", "ratelimit", "x-ratelimit", "x-ratelimit-epoch")


class SandboxState:
    """Everything the server remembers, behind one lock."""

    def __init__(self, **config: Any) -> None:
        self.lock = threading.Lock()
        self.reset(**config)

    def reset(self, **config: Any) -> None:
        with self.lock:
            self.config = {**DEFAULTS, **config}
            self.tokens = float(self.config["burst"] or self.config["rate"])
            self.refilled = time.monotonic()
            self.window_start = self.refilled
            self.window_end = self.refilled
            self.window_used = 0
            self._check_headers()
            self.by_key: dict[str, tuple[int, str]] = {}
            self.deleted: set[str] = set()
            self.effects: dict[str, int] = {}
            self.requests: list[dict[str, Any]] = []
            self.repeats = 0
            self.throttled = 0
            self.in_flight = 0
            self.peak_in_flight = 0
            self.dropped: set[str] = set()
            self.failures_given: dict[str, int] = {}
            self.rate_limits_given: dict[str, int] = {}
            self.storm_until = 0.0

    def configure(self, **config: Any) -> None:
        with self.lock:
            if "storm_seconds" in config:
                self.storm_until = time.time() + float(config.pop("storm_seconds"))
            self.config.update(config)
            self._check_headers()

    def _check_headers(self) -> None:
        if self.config["headers"] not in (None, *HEADER_FAMILIES):
            raise ValueError(f"headers must be one of {HEADER_FAMILIES} or None")

    def take_token(self) -> float:
        """0 when admitted, else seconds until the next token (or window)."""
        if self.config["window_seconds"]:
            return self._take_in_window(time.monotonic())
        rate = float(self.config["rate"])
        burst = float(self.config["burst"] or rate)
        now = time.monotonic()
        self.tokens = min(burst, self.tokens + (now - self.refilled) * rate)
        self.refilled = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / rate

    def window_quota(self) -> int:
        """Calls a fixed window admits: ``rate × window_seconds`` (at least one)."""
        return max(1, round(float(self.config["rate"]) * float(self.config["window_seconds"])))

    def _take_in_window(self, now: float) -> float:
        width = float(self.config["window_seconds"])
        if now >= self.window_end:  # a new window, aligned to the first one
            passed = math.floor((now - self.window_start) / width)
            self.window_start += passed * width
            self.window_end = self.window_start + width
            self.window_used = 0
        if self.window_used < self.window_quota():
            self.window_used += 1
            return 0.0
        return self.window_end - now

    def limit_headers(self) -> dict[str, str]:
        """The configured family's headers, from the limiter's state now (under the lock)."""
        family = self.config["headers"]
        if family is None:
            return dict(self.config["extra_headers"])
        now = time.monotonic()
        if self.config["window_seconds"]:
            window = float(self.config["window_seconds"])
            if now >= self.window_end:  # the window ended since the last call: all is left
                limit, remaining, reset = self.window_quota(), self.window_quota(), 0.0
            else:
                limit = self.window_quota()
                remaining, reset = limit - self.window_used, self.window_end - now
        else:
            rate = float(self.config["rate"])
            limit = int(float(self.config["burst"] or rate))
            tokens = min(limit, self.tokens + (now - self.refilled) * rate)
            remaining, reset, window = math.floor(tokens), (limit - tokens) / rate, limit / rate
        seconds = math.ceil(reset)
        headers = {
            "ietf": {
                "RateLimit-Policy": f'"default";q={limit};w={math.ceil(window)}',
                "RateLimit": f'"default";r={remaining};t={seconds}',
            },
            "ratelimit": {
                "RateLimit-Limit": str(limit),
                "RateLimit-Remaining": str(remaining),
                "RateLimit-Reset": str(seconds),
            },
            "x-ratelimit": {
                "X-RateLimit-Limit": str(limit),
                "X-RateLimit-Remaining": str(remaining),
                "X-RateLimit-Reset": str(seconds),
            },
            "x-ratelimit-epoch": {
                "X-RateLimit-Limit": str(limit),
                "X-RateLimit-Remaining": str(remaining),
                "X-RateLimit-Reset": str(math.ceil(time.time() + reset)),
            },
        }[family]
        return {**headers, **self.config["extra_headers"]}

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": list(self.requests),
                "effects": dict(self.effects),
                "repeats": self.repeats,
                "throttled": self.throttled,
                "peak_in_flight": self.peak_in_flight,
                "deleted": sorted(self.deleted),
                "config": dict(self.config),
            }


class Handler(BaseHTTPRequestHandler):
    server: SandboxServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = b"" if status == 204 else json.dumps(body).encode()
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self) -> None:
        if self.path == "/_sandbox/stats":
            self._json(200, self.server.state.stats())
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        state = self.server.state
        if self.path == "/_sandbox/config":
            state.configure(**self._body())
            self._json(200, {"ok": True})
        elif self.path == "/_sandbox/reset":
            state.reset(**self._body())
            self._json(200, {"ok": True})
        else:
            self._json(404, {"error": "not found"})

    def do_DELETE(self) -> None:
        state = self.server.state
        object_id = self.target(self.path)
        key = self.headers.get("Idempotency-Key")
        with state.lock:
            state.in_flight += 1
            state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
        try:
            latency = state.config["latency_ms"]
            if latency:
                time.sleep(latency / 1000)
            status, headers, drop = self._decide(object_id, key, self.path)
        finally:
            with state.lock:
                state.in_flight -= 1
        if drop:
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self._json(status, {"object": object_id, "status": status}, headers)

    def target(self, path: str) -> str:
        """What a path deletes: its last segment (an object id), or ``<object id>/<name>``
        when a segment names a derivative (``/v1/assets/obj-7/thumbnails``,
        ``/v1/transcodes/obj-7``)."""
        segments = path.rstrip("/").split("/")
        names = self.server.state.config["derivatives"]
        if len(segments) > 2 and segments[-1] in names:
            return f"{segments[-2]}/{segments[-1]}"
        named = [segment for segment in segments[:-1] if segment in names]
        return f"{segments[-1]}/{named[-1]}" if named else segments[-1]

    def _decide(
        self, object_id: str, key: str | None, path: str
    ) -> tuple[int, dict[str, str], bool]:
        """The answer, with the rate-limit headers of the limiter's state once it is given."""
        state = self.server.state
        with state.lock:
            status, headers, drop = self._answer(object_id, key, path)
            if status != 401:  # refused before the limiter: it says nothing of the quota
                headers = {**state.limit_headers(), **headers}
        return status, headers, drop

    def _answer(
        self, object_id: str, key: str | None, path: str
    ) -> tuple[int, dict[str, str], bool]:
        """The answer (the caller holds the state's lock)."""
        state = self.server.state
        record = {"t": time.time(), "object": object_id, "path": path, "key": key, "status": 0}
        state.requests.append(record)
        config = state.config
        if config["deny_all"]:
            record["status"] = 401
            return 401, {}, False
        wait = state.take_token()
        if record["t"] < state.storm_until:
            wait = max(wait, 0.001)  # answers Retry-After: 1 all through the storm
        if wait:
            state.throttled += 1
            record["status"] = 429
            return 429, {"Retry-After": str(max(1, math.ceil(wait)))}, False
        limited = int(config["rate_limited"].get(object_id, 0))
        if state.rate_limits_given.get(object_id, 0) < limited:
            state.rate_limits_given[object_id] = state.rate_limits_given.get(object_id, 0) + 1
            state.throttled += 1
            record["status"] = 429
            return 429, {"Retry-After": str(config["retry_after_seconds"])}, False
        if key and key in state.by_key:
            state.repeats += 1
            record["status"] = state.by_key[key][0]
            return state.by_key[key][0], {"Idempotent-Replayed": "true"}, False
        if object_id in config["hold"]:
            record["status"] = 403
            return 403, {}, False
        if object_id in config["locked"]:
            record["status"] = 423
            return 423, {}, False
        if object_id in config["reject"]:
            record["status"] = 422
            return 422, {}, False
        resource = object_id.rpartition("/")[2] if "/" in object_id else None
        if config["not_found_all"] or resource in config["not_found_derivatives"]:
            record["status"] = 404
            return 404, {}, False
        if object_id in config["redirect"]:
            record["status"] = 307
            return 307, {"Location": config["redirect"][object_id]}, False
        failures = int(config["fail_5xx"].get(object_id, 0))
        if state.failures_given.get(object_id, 0) < failures:
            state.failures_given[object_id] = state.failures_given.get(object_id, 0) + 1
            record["status"] = 503
            return 503, {}, False
        status = 404 if object_id in state.deleted else 204
        if status == 204:
            state.deleted.add(object_id)
            state.effects[object_id] = state.effects.get(object_id, 0) + 1
        if key:
            state.by_key[key] = (status, object_id)
        record["status"] = status
        drop = object_id in config["drop_after_apply"] and object_id not in state.dropped
        if drop:
            state.dropped.add(object_id)
            record["status"] = -1
        return status, {}, drop


class SandboxServer(ThreadingHTTPServer):
    """The API on a loopback port (0 picks a free one); ``start()`` serves in a thread."""

    daemon_threads = True

    def __init__(self, port: int = 0, *, host: str = "127.0.0.1", **config: Any) -> None:
        super().__init__((host, port), Handler)
        self.state = SandboxState(**config)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> SandboxServer:
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--rate", type=float, default=DEFAULTS["rate"])
    parser.add_argument("--burst", type=float, default=None)
    parser.add_argument("--window-seconds", type=float, default=None)
    parser.add_argument("--headers", choices=HEADER_FAMILIES, default=None)
    args = parser.parse_args()
    server = SandboxServer(
        args.port,
        rate=args.rate,
        burst=args.burst,
        window_seconds=args.window_seconds,
        headers=args.headers,
    )
    print(f"sandbox deletion API on {server.url} (rate {args.rate}/s)", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
