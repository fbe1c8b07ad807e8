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
- ``POST /retention/erasures``: request an urgent erasure, the body
  ``{policy, tenant | key | object, reason, deadline?, request_key?}``; the user
  needs the right to trigger the policy's DAG (401 without a login, 403 without
  the right, 422 bad input, nothing written). 201 with the erasure, 200 with the
  same erasure for a repeated request key; the ``retention__erasure-requests`` DAG
  is triggered at once (``triggered``; else its every-minute run takes it).
- ``GET /retention/erasures/{id}``: one erasure (state, deadline, counts, holds),
  for users who may read the policy's DAG; the answer policy of
  :func:`retention.airflow.lookup.find_erasure`, as for operations: 404 unknown or of a
  policy the user may not read, 503 when a database of a readable policy did not answer.
- A hint with ``"priority": "urgent"`` and a ``reason`` records one erasure per
  object (request key ``hint:<webhook-id>:<object>``, a prefix no other request key may
  take: 422) and answers 202 with their ids.

The Retention view's pages (``/retention/ui/``) are added to this app by
:func:`retention.ui.app.create_app`: the view builds on this layer, never the reverse.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from standardwebhooks.webhooks import Webhook

from retention.airflow import hold_actions
from retention.airflow.access import AirflowAccess
from retention.airflow.connections import postgres
from retention.airflow.lookup import LookupRefused, find_erasure, find_operation
from retention.erasures.request import (
    ERASURE_DAG_ID,
    ErasureKeyConflict,
    ErasureRejected,
    ErasureRequest,
    Scope,
    hint_request_key,
    request_erasure,
    validate,
)
from retention.events import hints
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
    may_trigger: Callable[[Any, str], bool] | None = None,
    start_erasures: Callable[[Any, str], str | None] | None = None,
) -> FastAPI:
    """The JSON API. ``airflow_auth=False`` only where no Airflow auth manager runs (tests),
    where ``authorize(user, dag_id)`` stands in for the auth manager's DAG permission to
    read, ``trigger_right(user, dag_id)`` for the one to trigger when placing or lifting
    holds (default: ``authorize``), ``may_trigger(user, dag_id)`` for it when requesting
    erasures (default: allowed), and ``start_erasures(user, note)`` for triggering the
    erasure DAG."""
    app = FastAPI(title="Retention", description=__doc__)
    user_dependency = _airflow_user() if airflow_auth else _no_user
    # the auth manager's DAG permission, asked the same way as the Retention view asks it
    may_read = authorize or (AirflowAccess().may_read if airflow_auth else lambda _u, _d: True)
    may_place_holds = trigger_right or (AirflowAccess().may_trigger if airflow_auth else may_read)

    def user_name(user: Any) -> str:
        if airflow_auth:
            return AirflowAccess().user_name(user)
        return str(getattr(user, "username", None) or user or "anonymous")

    may_request = may_trigger or (
        AirflowAccess().may_trigger if airflow_auth else lambda _u, _d: True
    )
    start = start_erasures or (_trigger_erasures if airflow_auth else lambda _u, _n: None)

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
            if hint.priority == "urgent":
                result = await run_in_threadpool(_apply_urgent, hint)
            else:
                result = await run_in_threadpool(_apply, hint)
        except hints.HintRejected as rejected:
            raise HTTPException(rejected.status, str(rejected)) from rejected
        if hint.priority == "urgent" and not result["duplicate"]:
            result["triggered"] = await run_in_threadpool(
                _start_quietly, start, None, f"urgent hint {hint.webhook_id}"
            )
        return JSONResponse(result, status_code=200 if result["duplicate"] else 202)

    _erasure_routes(app, user_dependency, may_read, may_request, start)

    @app.get("/operations/{key}")
    def get_operation(key: str, user: Any = Depends(user_dependency)) -> dict[str, Any]:  # noqa: B008
        try:
            return find_operation(key, list(_policies().values()), lambda d: may_read(user, d))
        except LookupRefused as refused:
            raise HTTPException(refused.status, refused.message) from None

    _hold_routes(app, user_dependency, may_read, may_place_holds, user_name)
    return app


def _erasure_routes(
    app: FastAPI,
    user_dependency: Callable[..., Any],
    may_read: Callable[[Any, str], bool],
    may_request: Callable[[Any, str], bool],
    start: Callable[[Any, str], str | None],
) -> None:
    """``/erasures``: request an urgent erasure (and start its DAG), read one back."""

    @app.post("/erasures", status_code=201)
    async def post_erasure(
        request: Request,
        user: Any = Depends(user_dependency),  # noqa: B008
    ) -> JSONResponse:
        body = await _json_body(request)  # a form, what a cross-site page can send: 415
        asked = _erasure_request(body, user, may_request)
        erasure, created = await run_in_threadpool(_record_erasure, asked)
        answer = _erasure_json(erasure)
        if created:
            answer["triggered"] = await run_in_threadpool(
                _start_quietly, start, user, f"erasure {erasure['erasure_id']}"
            )
        return JSONResponse(answer, status_code=201 if created else 200)

    @app.get("/erasures/{erasure_id}")
    def get_erasure_route(erasure_id: int, user: Any = Depends(user_dependency)) -> dict[str, Any]:  # noqa: B008
        try:
            row = find_erasure(erasure_id, list(_policies().values()), lambda d: may_read(user, d))
        except LookupRefused as refused:
            raise HTTPException(refused.status, refused.message) from None
        return _erasure_json(row)


def _hold_routes(
    app: FastAPI,
    user_dependency: Callable[..., Any],
    may_read: Callable[[Any, str], bool],
    may_place_holds: Callable[[Any, str], bool],
    user_name: Callable[[Any], str],
) -> None:
    """``/holds``: list, place and lift legal holds (see :mod:`retention.airflow.hold_actions`)."""

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
                lambda d: may_place_holds(user, d),
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
                lambda d: may_place_holds(user, d),
                lambda d: may_read(user, d),
            )
        except LookupRefused as refused:
            raise HTTPException(refused.status, refused.message) from None


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


def _erasure_request(
    body: Any, user: Any, may_request: Callable[[Any, str], bool]
) -> ErasureRequest:
    """The body as a validated request, or the HTTP answer that refuses it (nothing written)."""
    if not isinstance(body, dict):
        raise HTTPException(422, "body must be an object {policy, tenant|key|object, reason}")
    unknown = set(body) - {"policy", "tenant", "key", "object", "reason", "deadline", "request_key"}
    if unknown:
        raise HTTPException(422, f"unknown field(s) {sorted(unknown)}; nothing written")
    scopes = [name for name in ("tenant", "key", "object") if body.get(name) is not None]
    if len(scopes) != 1:
        raise HTTPException(422, "give exactly one of 'tenant', 'key' or 'object'; nothing written")
    policies = _policies()
    name = str(body.get("policy") or "")
    if name in policies and not may_request(user, policies[name].dag_id):
        raise HTTPException(
            403,
            f"requesting an erasure of policy {name!r} needs the right to trigger its DAG "
            f"{policies[name].dag_id!r}; nothing written",
        )
    deadline = None
    if body.get("deadline") is not None:
        try:
            deadline = dt.datetime.fromisoformat(str(body["deadline"]))
        except ValueError as bad:
            raise HTTPException(
                422, f"'deadline' {body['deadline']!r} is not ISO 8601; nothing written"
            ) from bad
    try:
        return validate(
            policies,
            policy=name,
            scope=scopes[0],
            value=body[scopes[0]],
            reason=body.get("reason"),
            requested_by=f"api:{_user_name(user)}",
            deadline=deadline,
            request_key=body.get("request_key"),
        )
    except ErasureRejected as refused:
        raise HTTPException(422, str(refused)) from refused


def _user_name(user: Any) -> str:
    if user is None:
        return "anonymous"
    get_name = getattr(user, "get_name", None)
    return str(get_name() if callable(get_name) else user)


def _record_erasure(asked: ErasureRequest) -> tuple[dict[str, Any], bool]:
    """The erasure recorded (or already recorded under the key); 409 when the key names
    another request."""
    try:
        with postgres(asked.policy.postgres_conn_id) as conn:
            return request_erasure(conn, asked)
    except ErasureKeyConflict as conflict:
        raise HTTPException(409, str(conflict)) from conflict


def _erasure_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        key: value.isoformat() if isinstance(value, dt.datetime) else value
        for key, value in row.items()
    }


def _apply_urgent(hint: hints.Hint) -> dict[str, Any]:
    """An urgent hint's objects as erasure requests, one per object, in one transaction."""
    policy = hint.policy
    made: list[int] = []
    known = 0
    with postgres(policy.postgres_conn_id) as conn, conn.transaction():
        for object_id, _ in hint.objects:
            try:
                asked = validate(
                    {policy.name: policy},
                    policy=policy.name,
                    scope=Scope.OBJECT,
                    value=object_id,
                    reason=hint.reason,
                    requested_by=f"hint:{hint.webhook_id}",
                )
            except ErasureRejected as refused:
                raise hints.HintRejected(422, str(refused)) from refused
            # the hints' own part of the key space, which validate() refuses to anyone else
            asked = replace(asked, request_key=hint_request_key(hint.webhook_id, object_id))
            try:
                erasure, created = request_erasure(conn, asked)
            except ErasureKeyConflict as conflict:  # the webhook id again, another reason
                raise hints.HintRejected(409, str(conflict)) from conflict
            made.append(erasure["erasure_id"])
            known += not created
    return {
        "duplicate": known == len(made),
        "webhook_id": hint.webhook_id,
        "priority": "urgent",
        "erasures": made,
        "operations": [],
    }


def _trigger_erasures(user: Any, note: str) -> str | None:
    """Start a run of the erasure DAG now (its every-minute schedule is the fallback)."""
    return AirflowAccess().trigger(ERASURE_DAG_ID, {}, user, note)


def _start_quietly(start: Callable[[Any, str], str | None], user: Any, note: str) -> str | None:
    """Trigger the erasure DAG; a refusal is logged, not answered: the request is recorded
    and the DAG's every-minute run works it anyway."""
    try:
        return start(user, note)
    except Exception:
        log.exception(
            "could not trigger %s for %s; its next scheduled run takes it", ERASURE_DAG_ID, note
        )
        return None
