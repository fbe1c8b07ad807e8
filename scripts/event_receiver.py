"""A local receiver of retention.deleted events for the demo: verifies, deduplicates, counts.

Each POST is verified with the Standard Webhooks scheme (``standardwebhooks``
library, 5-minute tolerance) against the secret it is given; a bad signature
gets 401. Events are deduplicated on ``webhook-id``, as a real receiver must,
since delivery is at-least-once.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


class Handler(BaseHTTPRequestHandler):
    server: EventReceiver
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        receiver = self.server
        try:
            event = Webhook(receiver.secret).verify(body, headers)
            status = 204
        except WebhookVerificationError:
            event, status = None, 401
        with receiver.lock:
            if event is None:
                receiver.rejected += 1
            elif headers["webhook-id"] in receiver.events:
                receiver.duplicates += 1
            else:
                receiver.events[headers["webhook-id"]] = event
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


class EventReceiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, secret: str, *, host: str = "127.0.0.1") -> None:
        super().__init__((host, port), Handler)
        self.secret = secret
        self.lock = threading.Lock()
        self.events: dict[str, dict[str, Any]] = {}
        self.duplicates = 0
        self.rejected = 0

    def start(self) -> EventReceiver:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def summary(self) -> str:
        sample = json.dumps(next(iter(self.events.values()), {}), sort_keys=True)
        return (
            f"{len(self.events)} retention.deleted events verified, {self.duplicates} "
            f"duplicate deliveries, {self.rejected} bad signatures; first: {sample}"
        )
