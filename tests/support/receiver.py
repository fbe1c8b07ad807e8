"""A webhook receiver on loopback for event-delivery tests: records, verifies, deduplicates."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from svix.webhooks import Webhook as SvixWebhook


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


class Handler(BaseHTTPRequestHandler):
    server: EventReceiver
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        receiver = self.server
        with receiver.lock:
            receiver.received.append({"headers": headers, "body": body, "t": time.time()})
            event_id = headers.get("webhook-id", "")
            delay = 0.0
            if receiver.delay_first_seconds and event_id not in receiver.delayed_ids:
                receiver.delayed_ids.add(event_id)
                delay = receiver.delay_first_seconds
            status = receiver.statuses.pop(0) if receiver.statuses else 200
        if delay:
            time.sleep(delay)  # the sender times out; the event counts as not received
            self.close_connection = True
            return
        if receiver.latency_seconds:
            time.sleep(receiver.latency_seconds)
        if 200 <= status < 300:
            SvixWebhook(receiver.secret).verify(body, headers)  # independent implementation
            with receiver.lock:
                if event_id not in receiver.seen_ids:
                    receiver.seen_ids.add(event_id)
                    receiver.logical_events.append(json.loads(body))
        self.send_response(status)
        if 300 <= status < 400 and receiver.location:
            self.send_header("Location", receiver.location)
        self.send_header("Content-Length", "0")
        self.end_headers()


class EventReceiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, secret: str) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.secret = secret
        self.lock = threading.Lock()
        self.received: list[dict[str, Any]] = []
        self.seen_ids: set[str] = set()
        self.delayed_ids: set[str] = set()
        self.logical_events: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.delay_first_seconds = 0.0
        self.latency_seconds = 0.0
        self.location = ""
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def connection_json(self) -> str:
        port = self.server_address[1]
        return json.dumps(
            {"conn_type": "http", "host": "127.0.0.1", "port": port, "password": self.secret}
        )
