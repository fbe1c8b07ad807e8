"""A stand-in for the calls of Airflow's REST API that tasks make, on loopback.

``POST /auth/token`` (the simple auth manager's login: a JSON body with username and
password, answered 201 with an access_token) and ``GET /api/v2/pools/{pool}`` (a
``PoolResponse``: slots, occupied, running, queued, open…), for one pool. The test
plays the scheduler: :meth:`AirflowPools.task` occupies the pool's slots while a task
runs, as the scheduler counts a queued or running task instance, so the stats a pass
reads are the ones it is part of. ``GET /api/v2/dags/{dag_id}/dagRuns`` lists the runs
in :attr:`AirflowPools.dag_runs` filtered as Airflow 3.3 filters them by the parameters
the lag alert sends (``state``, repeated; ``logical_date_gt``/``_gte``; ``order_by``;
``limit``), and ignores any other parameter, as Airflow does. Every request is kept.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


class _Handler(BaseHTTPRequestHandler):
    server: AirflowPools
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests.append(("POST", self.path))
        if self.path != "/auth/token":
            self._json(404, {"detail": "Not Found"})
        elif (body.get("username"), body.get("password")) != self.server.user:
            self._json(401, {"detail": "Invalid credentials"})
        else:
            self._json(201, {"access_token": self.server.token})

    def do_GET(self) -> None:
        self.server.requests.append(("GET", self.path))
        prefix = "/api/v2/pools/"
        url = urlsplit(self.path)
        if self.headers.get("Authorization") != f"Bearer {self.server.token}":
            self._json(401, {"detail": "Not authenticated"})
        elif url.path.startswith("/api/v2/dags/") and url.path.endswith("/dagRuns"):
            dag_id = unquote(url.path[len("/api/v2/dags/") : -len("/dagRuns")])
            if self.server.on_dag_runs is not None:
                self.server.on_dag_runs()
            self._json(200, self.server.dag_runs_answer(dag_id, parse_qs(url.query)))
        elif not self.path.startswith(prefix) or unquote(self.path[len(prefix) :]) != (
            self.server.pool
        ):
            self._json(404, {"detail": f"The Pool with name: `{self.path}` was not found"})
        else:
            self._json(200, self.server.response())


class AirflowPools(ThreadingHTTPServer):
    """One pool of ``slots`` behind the REST API's login; ``start()`` serves in a thread."""

    daemon_threads = True

    def __init__(self, pool: str, slots: int, login: str = "pools", password: str = "") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pool = pool
        self.slots = slots
        self.user = (login, password or secrets.token_hex(8))
        self.token = secrets.token_hex(16)
        self.occupied = 0
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.dag_runs: list[dict[str, Any]] = []  # DAGRunResponse-like: dag_id, dag_run_id, …
        self.on_dag_runs: Callable[[], None] | None = None  # called as a dagRuns GET arrives

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def connection(self) -> str:
        """The connection ``retention_airflow_api`` as an ``AIRFLOW_CONN_*`` value."""
        login, password = self.user
        return json.dumps(
            {
                "conn_type": "http",
                "host": "127.0.0.1",
                "port": self.server_address[1],
                "schema": "http",
                "login": login,
                "password": password,
            }
        )

    def response(self) -> dict[str, Any]:
        """Airflow 3's ``PoolResponse`` for the pool now (its running tasks occupy it)."""
        with self.lock:
            occupied = self.occupied
        return {
            "name": self.pool,
            "slots": self.slots,
            "description": None,
            "include_deferred": False,
            "occupied_slots": occupied,
            "running_slots": occupied,
            "queued_slots": 0,
            "scheduled_slots": 0,
            "open_slots": self.slots - occupied,
            "deferred_slots": 0,
        }

    def dag_runs_answer(self, dag_id: str, query: dict[str, list[str]]) -> dict[str, Any]:
        """``DAGRunCollectionResponse`` of the DAG's runs that match Airflow's filters."""

        def when(text: str) -> dt.datetime:
            return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))

        runs = [r for r in self.dag_runs if r["dag_id"] == dag_id]
        if states := query.get("state"):
            runs = [r for r in runs if r["state"] in states]
        for name, keep in (
            ("logical_date_gt", lambda a, b: a > b),
            ("logical_date_gte", lambda a, b: a >= b),
        ):
            if name in query:
                bound = when(query[name][0])
                dated = [r for r in runs if r["logical_date"]]
                runs = [r for r in dated if keep(when(r["logical_date"]), bound)]
        if query.get("order_by") == ["logical_date"]:
            runs.sort(key=lambda r: when(r["logical_date"]))
        limit = int(query.get("limit", ["50"])[0])
        return {"dag_runs": runs[:limit], "total_entries": len(runs)}

    @contextmanager
    def task(self, slots: int = 1) -> Iterator[None]:
        """A task instance holding ``slots`` of the pool while it runs."""
        with self.lock:
            self.occupied += slots
        try:
            yield
        finally:
            with self.lock:
                self.occupied -= slots

    def start(self) -> AirflowPools:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
