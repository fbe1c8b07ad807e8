"""The one HTTP sender of every job kind: a reused session, no redirects, a timeout.

The session comes from the provider's ``HttpHook`` (``retention.airflow.connections``
builds it, so the connection's host, scheme, auth and extra headers apply), or
from a plain ``requests.Session`` outside Airflow. Redirects are never followed:
a 3xx comes back as an answer, and the classification tables count it as a
failed attempt, so a signed body or an idempotency key never travels to a host
the connection did not name. Timeouts and connection errors come back as
results, not exceptions, so the caller can classify them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import requests


@dataclass(frozen=True)
class HttpResult:
    status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    started: float = 0.0
    finished: float = 0.0


class HttpSender:
    """Sends requests over one session; ``url_for`` turns an endpoint path into a URL."""

    def __init__(
        self, session: requests.Session, url_for: Callable[[str], str], timeout_seconds: float
    ) -> None:
        self.session = session
        self.url_for = url_for
        self.timeout_seconds = timeout_seconds

    def send(
        self,
        method: str,
        endpoint: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> HttpResult:
        started = time.time()
        try:
            response = self.session.request(
                method,
                self.url_for(endpoint),
                headers=dict(headers or {}),
                data=body,
                timeout=self.timeout_seconds,
                allow_redirects=False,
            )
        except requests.Timeout:
            return HttpResult(None, error="timeout", started=started, finished=time.time())
        except requests.ConnectionError:
            return HttpResult(None, error="connection", started=started, finished=time.time())
        response.close()
        return HttpResult(
            response.status_code, dict(response.headers), started=started, finished=time.time()
        )

    def close(self) -> None:
        self.session.close()


def plain_sender(base_url: str, timeout_seconds: float) -> HttpSender:
    """A sender without Airflow (scripts and tests): ``base_url`` + endpoint."""
    return HttpSender(
        requests.Session(), lambda endpoint: base_url.rstrip("/") + endpoint, timeout_seconds
    )
