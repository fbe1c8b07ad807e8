"""Calls to the remote API through the provider's HttpHook, one session per task.

The hook resolves the connection (host, scheme, auth, extra headers) once; every
attempt sends the operation key in the policy's idempotency header, so a retry
after a timeout or a crash is recognised by the API as the same request.
Timeouts and connection errors come back as results, not exceptions, so the
caller can classify them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

from retention.policy import RemoteSpec


@dataclass(frozen=True)
class HttpResult:
    status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    started: float = 0.0
    finished: float = 0.0


def endpoint_for(remote: RemoteSpec, object_id: str, tenant: str | None) -> str:
    """The policy's endpoint with ``{object_id}`` and ``{tenant_id}`` URL-encoded."""
    return remote.endpoint.format(
        object_id=quote(str(object_id), safe=""), tenant_id=quote(str(tenant or ""), safe="")
    )


class RemoteClient:
    """Sends one request per operation attempt over a reused HttpHook session."""

    def __init__(self, remote: RemoteSpec) -> None:
        from airflow.providers.http.hooks.http import HttpHook

        self.remote = remote
        self.hook = HttpHook(method=remote.method, http_conn_id=remote.http_conn_id)
        self.session: requests.Session = self.hook.get_conn()

    def send(self, operation_key: str, object_id: str, tenant: str | None) -> HttpResult:
        url = self.hook.url_from_endpoint(endpoint_for(self.remote, object_id, tenant))
        request = requests.Request(
            self.remote.method, url, headers={self.remote.idempotency_header: operation_key}
        )
        prepared = self.session.prepare_request(request)
        options: dict[str, Any] = {
            "timeout": self.remote.request_timeout_seconds,
            "check_response": False,
            "allow_redirects": False,
        }
        started = time.time()
        try:
            response = self.hook.run_and_check(self.session, prepared, options)
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
