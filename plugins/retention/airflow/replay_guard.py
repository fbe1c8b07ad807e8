"""The api-server's replay guard: a request creating a ``retention__replay`` run must come
from a user who may trigger the DAG of the policy it replays.

The right to trigger ``retention__replay`` lets a user choose any policy in
``conf.policy``; Airflow checks only that right. The replay task cannot always
check the rest: it knows its user only by name, and most auth managers (FAB,
the managed deployments') cannot look a name up outside a request. The
api-server is where the user is known, for every auth manager, so the plugin
registers this ASGI middleware on it (``fastapi_root_middlewares``). It
intercepts ``POST /api/v2/dags/retention__replay/dagRuns`` (what the UI's
trigger form, the REST API and ``airflowctl`` use), resolves the request's user
as Airflow's routes do, and answers 403 naming the policy and the missing right
when that user may not trigger ``retention__<policy>``. Every other request,
and every request without a valid login (Airflow answers 401 or 403 itself),
passes through untouched; an intercepted request that passes gets its body
back byte for byte.

The decision is :func:`guard_refusal`, a pure function of the body, the
policies that can be replayed and the user's rights.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from retention.airflow.rights import may_trigger_dag, request_user
from retention.policy.model import DAG_ID_PREFIX

REPLAY_DAG_ID = f"{DAG_ID_PREFIX}replay"
REPLAY_RUNS_PATH = f"/api/v2/dags/{REPLAY_DAG_ID}/dagRuns"  # POST creates a run
MAX_BODY_BYTES = 1024 * 1024  # a trigger's conf is a few hundred bytes

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Message], Any]


def guard_refusal(
    body: bytes, replayable: Sequence[str], may_trigger: Callable[[str], bool]
) -> str | None:
    """Why a request to create a ``retention__replay`` run with ``body`` is refused, or None.

    ``replayable`` are the policies with a remote section; ``may_trigger``
    answers for a DAG id whether the request's user may trigger it. A body
    Airflow itself will refuse (not JSON, ``conf`` not an object) is not judged
    here: Airflow answers 422. A conf that names no policy is refused (the
    guard does not guess the DAG's default), and an unknown one as the replay
    task refuses it.
    """
    try:
        payload = json.loads(body)
    except ValueError:  # includes UnicodeDecodeError
        return None
    if not isinstance(payload, dict):
        return None
    conf = payload.get("conf")
    if conf is None:
        conf = {}
    if not isinstance(conf, dict):
        return None
    if "policy" not in conf:
        # The run would take the DAG's default param, parsed by the dag-processor from its
        # own policies file; the guard does not guess it (a file that differs here would
        # check one policy and replay another).
        return (
            f"{REPLAY_DAG_ID} refused: conf must name the 'policy' to replay, one of "
            f"{sorted(replayable)}; its right to trigger that policy's DAG is checked"
        )
    policy = conf["policy"]
    if not isinstance(policy, str) or policy not in replayable:
        return (
            f"{REPLAY_DAG_ID} refused: conf 'policy' {policy!r} is not a policy with a "
            f"remote section; choose one of {sorted(replayable)}"
        )
    dag_id = f"{DAG_ID_PREFIX}{policy}"
    if may_trigger(dag_id):
        return None
    return (
        f"{REPLAY_DAG_ID} refused for policy {policy!r}: you may not trigger the DAG "
        f"{dag_id!r}, and replaying the policy's dead letters needs that right as well as "
        f"the right to trigger {REPLAY_DAG_ID}. Ask an admin for it, or ask a user who has "
        "it to replay."
    )


def replayable_policies() -> list[str]:
    """The policies the replay DAG offers (those with a remote section), in file order."""
    from retention.policy import load_policies

    return [p.name for p in load_policies().policies if p.remote is not None]


def _route(scope: Scope) -> str:
    """The request's path below the api-server's root path (``[api] base_url``)."""
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path", ""))
    if root and path.startswith(root):
        path = path[len(root) :]
    return path.rstrip("/") or "/"


class ReplayGuard:
    """ASGI middleware: 403 for a ``retention__replay`` run its user may not start."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Any]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or _route(scope) != REPLAY_RUNS_PATH
        ):
            await self.app(scope, receive, send)
            return
        from starlette.requests import Request
        from starlette.responses import JSONResponse

        user = await request_user(Request(scope))  # headers and cookies: the body stays unread
        if user is None:  # Airflow answers 401 (no login) or 403 (a bad token) itself
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive, MAX_BODY_BYTES)
        if body is None:
            return  # the client went away before sending its body
        replayed = _replaying(body, receive)
        if len(body) > MAX_BODY_BYTES:
            detail = f"{REPLAY_DAG_ID}: a request body over {MAX_BODY_BYTES:,} bytes"
            await JSONResponse({"detail": detail}, status_code=413)(scope, replayed, send)
            return
        refusal = self._refusal(user, body)
        if refusal is None:
            await self.app(scope, replayed, send)
            return
        await JSONResponse({"detail": refusal}, status_code=403)(scope, replayed, send)

    def _refusal(self, user: Any, body: bytes) -> str | None:
        from airflow.api_fastapi.app import get_auth_manager

        manager = get_auth_manager()
        refusal = guard_refusal(
            body, replayable_policies(), lambda dag_id: may_trigger_dag(manager, user, dag_id)
        )
        if refusal is not None:
            log.warning("replay guard: user %r: %s", user.get_name(), refusal)
        return refusal


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The request body, read up to just past ``limit`` bytes (a longer one is refused
    whole), or None when the client disconnected first."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit or not message.get("more_body", False):
            return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that delivers ``body`` once, then what the client sends next (its
    disconnect)."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
