"""The plugin's HTTP API, served by the Airflow api-server under ``/retention``.

- ``POST /retention/hints``: signed inbound hints (Standard Webhooks; secret =
  password of the connection ``$RETENTION_HINTS_CONN_ID``, default
  ``retention_hints``). 202 only after the commit; 401 bad signature or stale
  timestamp; 413 too large; 422 unknown policy or object, bad body; a repeated
  ``webhook-id`` is a no-op (200). Nothing is written unless everything is valid.
- ``GET /retention/operations/{key}``: the evidence record of one operation
  (the same as ``python -m retention.cli explain KEY``), for authenticated
  Airflow users.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import psycopg
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from retention.airflow.connections import postgres
from retention.events import hints
from retention.evidence.explain import UnknownOperation, explain
from retention.policy import Policy, load_policies

log = logging.getLogger(__name__)


def _policies() -> dict[str, Policy]:
    return {p.name: p for p in load_policies().policies}


def _hint_secret() -> str:
    from airflow.sdk import BaseHook

    conn_id = os.environ.get("RETENTION_HINTS_CONN_ID", "retention_hints")
    try:
        secret = BaseHook.get_connection(conn_id).password or ""
    except Exception as missing:
        raise HTTPException(503, f"hints are not configured: connection {conn_id!r}") from missing
    if not secret.startswith("whsec_"):
        raise HTTPException(503, f"connection {conn_id!r}: password must be a whsec_ secret")
    return secret


def _airflow_user() -> Callable[..., Any]:
    from airflow.api_fastapi.core_api.security import requires_authenticated

    return requires_authenticated()


def create_app(*, airflow_auth: bool = True) -> FastAPI:
    """The app; ``airflow_auth=False`` only where no Airflow auth manager runs (tests)."""
    app = FastAPI(title="Retention", description=__doc__)
    evidence_guard = [Depends(_airflow_user())] if airflow_auth else []

    @app.post("/hints", status_code=202)
    async def post_hints(request: Request) -> JSONResponse:
        declared = int(request.headers.get("content-length") or 0)
        if declared > hints.MAX_BODY_BYTES:
            raise HTTPException(413, f"body over {hints.MAX_BODY_BYTES} bytes")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > hints.MAX_BODY_BYTES:
                raise HTTPException(413, f"body over {hints.MAX_BODY_BYTES} bytes")
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            hints.verify(body, headers, _hint_secret())
            hint = hints.parse(body, headers, _policies())
            result = await run_in_threadpool(_apply, hint)
        except hints.HintRejected as rejected:
            raise HTTPException(rejected.status, str(rejected)) from rejected
        return JSONResponse(result, status_code=200 if result["duplicate"] else 202)

    @app.get("/operations/{key}", dependencies=evidence_guard)
    def get_operation(key: str) -> dict[str, Any]:
        unreachable: list[str] = []
        for conn_id in sorted({p.postgres_conn_id for p in _policies().values() if p.remote}):
            try:
                with postgres(conn_id) as conn:
                    return explain(conn, key)
            except UnknownOperation:
                continue
            except psycopg.Error as failed:  # no ledger there yet, or the database is down
                log.warning("evidence lookup in %s failed: %s", conn_id, failed)
                unreachable.append(conn_id)
        if unreachable:
            raise HTTPException(
                503,
                f"no operation with key {key!r} in the databases that answered; "
                f"could not read {unreachable}",
            )
        raise HTTPException(404, f"no operation with key {key!r}")

    return app


def _apply(hint: hints.Hint) -> dict[str, Any]:
    with postgres(hint.policy.postgres_conn_id) as conn:
        return hints.apply(conn, hint)
