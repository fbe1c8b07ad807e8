"""An alert receiver on loopback: records each POST (path, headers, JSON body), answers
with queued statuses, and can hold its answers back until a test lets them go."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class AlertHandler(BaseHTTPRequestHandler):
    server: AlertReceiver
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        receiver = self.server
        with receiver.lock:
            status = receiver.statuses.pop(0) if receiver.statuses else 200
        receiver.answer_gate.wait(10)  # tests hold answers back to make senders overlap
        with receiver.lock:
            receiver.received.append(
                {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(body),
                    "status": status,
                }
            )
            receiver.arrived.notify_all()
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


class AlertReceiver(ThreadingHTTPServer):
    """Records every POST (path, headers, JSON body) and answers with queued statuses."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), AlertHandler)
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        self.answer_gate = threading.Event()
        self.answer_gate.set()
        self.received: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def connection(self, **extra: Any) -> str:
        return json.dumps(
            {
                "conn_type": "http",
                "host": "127.0.0.1",
                "port": self.server_address[1],
                "schema": "http",
                "extra": extra,
            }
        )

    def ok(self) -> list[dict[str, Any]]:
        return [r for r in self.received if 200 <= r["status"] < 300]
