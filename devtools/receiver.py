"""One webhook receiver for everything the project POSTs: signed events and alerts.

The demo and ``make airflow`` point the ``media_events`` connection at it; the
tests point event and alert connections at it. Every POST is recorded (path,
lower-cased headers, raw body, its JSON when it parses, the status answered) and
answered with the next queued status (200 when none is queued).

Given a ``secret``, a POST answered 2xx must carry a valid Standard Webhooks
signature (checked with the ``svix`` library, not the sender's own code): a bad
one is answered 401 and counted in ``rejected``. Verified events are
deduplicated on ``webhook-id`` into ``events``, as a real receiver must, since
delivery is at least once; a repeat is counted in ``duplicates``. Without a
secret (alerts carry no signature) nothing is verified and ``events`` stays
empty.

Tests can also make it misbehave: hold every answer until ``answer_gate`` is
set (so that senders overlap), hang up on the first delivery of each event
after ``delay_first_seconds`` (the sender times out), answer slowly
(``latency_seconds``) or redirect (a queued 3xx with ``location``).
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER_GATE_SECONDS = 10.0
"""The longest an answer waits for ``answer_gate``: a test that forgets to set it still ends."""


def new_secret() -> str:
    """A fresh Standard Webhooks signing secret (``whsec_`` and 24 random bytes, base64)."""
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


def parsed_json(body: bytes) -> Any:
    """The body as JSON, or None when it is not JSON."""
    try:
        return json.loads(body)
    except ValueError:
        return None


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        event_id = headers.get("webhook-id", "")
        receiver = self.server
        with receiver.lock:
            status = receiver.statuses.pop(0) if receiver.statuses else 200
            record = {
                "path": self.path,
                "headers": headers,
                "body": body,
                "json": parsed_json(body),
                "status": status,
            }
            receiver.received.append(record)
            receiver.arrived.notify_all()
            delay = 0.0
            if receiver.delay_first_seconds and event_id not in receiver.delayed_ids:
                receiver.delayed_ids.add(event_id)
                delay = receiver.delay_first_seconds
        if delay:
            time.sleep(delay)  # the sender times out; the event counts as not received
            self.close_connection = True
            return
        receiver.answer_gate.wait(ANSWER_GATE_SECONDS)
        if receiver.latency_seconds:
            time.sleep(receiver.latency_seconds)
        if 200 <= status < 300 and receiver.secret is not None:
            status = receiver.accept(event_id, body, headers)
            record["status"] = status
        self.send_response(status)
        if 300 <= status < 400 and receiver.location:
            self.send_header("Location", receiver.location)
        self.send_header("Content-Length", "0")
        self.end_headers()


class Receiver(ThreadingHTTPServer):
    """Records every POST; verifies and deduplicates signed events when given a secret."""

    daemon_threads = True

    def __init__(self, secret: str | None = None, *, host: str = "127.0.0.1", port: int = 0):
        super().__init__((host, port), ReceiverHandler)
        self.secret = secret
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)  # notified on every POST
        self.answer_gate = threading.Event()
        self.answer_gate.set()
        self.received: list[dict[str, Any]] = []
        self.events: dict[str, Any] = {}  # verified event bodies by webhook-id, first only
        self.duplicates = 0
        self.rejected = 0
        self.statuses: list[int] = []
        self.delay_first_seconds = 0.0
        self.delayed_ids: set[str] = set()
        self.latency_seconds = 0.0
        self.location = ""

    def start(self) -> Receiver:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.answer_gate.set()  # no answer left waiting
        self.shutdown()
        self.server_close()

    def accept(self, event_id: str, body: bytes, headers: dict[str, str]) -> int:
        """The status for a signed event: 401 for a bad signature, else 200 (kept once)."""
        assert self.secret is not None
        # Imported here: svix is a development dependency, and alerts need no signature.
        from svix.webhooks import Webhook, WebhookVerificationError

        try:
            Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError:
            with self.lock:
                self.rejected += 1
            return 401
        with self.lock:
            if event_id in self.events:
                self.duplicates += 1
            else:
                self.events[event_id] = json.loads(body)
        return 200

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.server_address[1]}"

    def connection(self, **extra: Any) -> str:
        """An Airflow HTTP connection (JSON) to this receiver; its password is the secret."""
        fields: dict[str, Any] = {
            "conn_type": "http",
            "host": self.server_address[0],
            "port": self.server_address[1],
            "schema": "http",
            "extra": extra,
        }
        if self.secret is not None:
            fields["password"] = self.secret
        return json.dumps(fields)

    def summary(self) -> str:
        """One line for the demo's report: what was verified, repeated and refused."""
        sample = json.dumps(next(iter(self.events.values()), {}), sort_keys=True)
        return (
            f"{len(self.events)} retention.deleted events verified, {self.duplicates} "
            f"duplicate deliveries, {self.rejected} bad signatures; first: {sample}"
        )
