"""The plugin's HTTP API, served by the Airflow api-server under ``/retention``.

- ``POST /retention/hints``: signed inbound hints (Standard Webhooks; secret =
  password of the connection ``$RETENTION_HINTS_CONN_ID``, default
  ``retention_hints``). 202 only after the commit; 401 bad signature or stale
  timestamp; 413 too large; 422 unknown policy or object, bad body; a repeated
  ``webhook-id`` is a no-op (200). Nothing is written unless everything is valid.
- ``GET /retention/operations/{key}``: the evidence record of one operation
  (the same as ``python -m retention.cli explain KEY``), for Airflow users who
  may read the DAG of the operation's policy (Airflow's auth manager decides);
  401 without a login, then the answer policy of
  :func:`retention.airflow.lookup.find_operation`, the same as the Retention
  view's evidence page: 404 for a key that is not a 64-hex operation key, is
  unknown, or belongs to a policy whose DAG the user may not read (the same
  answer: a 403 would confirm the key and name the policy); 503 when a
  database of a readable policy did not answer.

- ``GET /retention/holds[?policy=P]``: legal holds of the policies whose DAG the user
  may read, and every-policy holds, newest first (``{"holds": [...], "unanswered": [...]}``).
- ``POST /retention/holds``: place a hold, ``{"policy"?, "match": "tenant"|"key"|"object",
  "value", "reason"}`` (no policy: every policy) → 201 ``{"holds": [...]}``, one per
  database; ``POST /retention/holds/{id}/lift`` ``{"reason"}`` → 200, the lifted hold.
  Both need the right to trigger the DAG of every policy the hold covers (403), a JSON
  body (415: a cross-site form cannot send one), a reason (422) and a known policy
  (422); the user is recorded. See :mod:`retention.airflow.hold_actions`.

The Retention view's pages (``/retention/ui/``) are added to this app by
:func:`retention.ui.app.create_app`: the view builds on this layer, never the reverse.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from standardwebhooks.webhooks import Webhook

from retention.airflow import hold_actions
from retention.airflow.access import AirflowAccess
from retention.airflow.connections import postgres
from retention.airflow.lookup import LookupRefused, find_operation
from retention.events import hints
from retention.policy import Policy, load_policies


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
    try:
        Webhook(secret)
    except Exception as broken:  # not base64 after the prefix: our configuration, not theirs
        raise HTTPException(
            503, f"connection {conn_id!r}: the whsec_ secret is malformed"
        ) from broken
    return secret


def _airflow_user() -> Callable[..., Any]:
    """Airflow's own dependency: the logged-in user (401 without a token, 403 for a bad one)."""
    from airflow.api_fastapi.core_api.security import get_user

    return get_user


def _no_user() -> None:
    return None


def create_app(
    *,
    airflow_auth: bool = True,
    authorize: Callable[[Any, str], bool] | None = None,
    trigger_right: Callable[[Any, str], bool] | None = None,
) -> FastAPI:
    """The JSON API. ``airflow_auth=False`` only where no Airflow auth manager runs (tests),
    where ``authorize(user, dag_id)`` stands in for the auth manager's DAG permission to
    read, and ``trigger_right(user, dag_id)`` for the one to trigger (default: ``authorize``)."""
    app = FastAPI(title="Retention", description=__doc__)
    user_dependency = _airflow_user() if airflow_auth else _no_user
    # the auth manager's DAG permission, asked the same way as the Retention view asks it
    may_read = authorize or (AirflowAccess().may_read if airflow_auth else lambda _u, _d: True)
    may_trigger = trigger_right or (AirflowAccess().may_trigger if airflow_auth else may_read)

    def user_name(user: Any) -> str:
        if airflow_auth:
            return AirflowAccess().user_name(user)
        return str(getattr(user, "username", None) or user or "anonymous")

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

    @app.get("/operations/{key}")
    def get_operation(key: str, user: Any = Depends(user_dependency)) -> dict[str, Any]:  # noqa: B008
        try:
            return find_operation(key, list(_policies().values()), lambda d: may_read(user, d))
        except LookupRefused as refused:
            raise HTTPException(refused.status, refused.message) from None

    @app.get("/holds")
    def get_holds(
        policy: str | None = None,
        user: Any = Depends(user_dependency),  # noqa: B008
    ) -> dict[str, Any]:
        holds, unanswered = hold_actions.listing(
            list(_policies().values()), lambda d: may_read(user, d), policy
        )
        return {"holds": holds, "unanswered": unanswered}

    @app.post("/holds", status_code=201)
    async def post_hold(request: Request, user: Any = Depends(user_dependency)) -> dict[str, Any]:  # noqa: B008
        body = await _json_body(request)
        try:
            placed = await run_in_threadpool(
                hold_actions.place,
                list(_policies().values()),
                body,
                user_name(user),
                lambda d: may_trigger(user, d),
            )
        except LookupRefused as refused:
            raise HTTPException(refused.status, refused.message) from None
        return {"holds": placed}

    @app.post("/holds/{hold_id}/lift")
    async def post_lift(
        hold_id: int,
        request: Request,
        user: Any = Depends(user_dependency),  # noqa: B008
    ) -> dict[str, Any]:
        body = await _json_body(request)
        try:
            return await run_in_threadpool(
                hold_actions.lift,
                list(_policies().values()),
                hold_id,
                body.get("reason"),
                user_name(user),
                lambda d: may_trigger(user, d),
                lambda d: may_read(user, d),
            )
        except LookupRefused as refused:
            raise HTTPException(refused.status, refused.message) from None

    return app


async def _json_body(request: Request) -> dict[str, Any]:
    """A JSON object body; a form (what a cross-site page can send) is a 415."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise HTTPException(415, "send the body as application/json")
    try:
        body = await request.json()
    except ValueError:
        raise HTTPException(422, "body is not JSON") from None
    if not isinstance(body, dict):
        raise HTTPException(422, "body must be a JSON object")
    return body


def _apply(hint: hints.Hint) -> dict[str, Any]:
    with postgres(hint.policy.postgres_conn_id) as conn:
        return hints.apply(conn, hint)
