"""The Retention view: server-rendered pages under ``/retention/ui/`` on the api-server.

- ``GET  /retention/ui/``: per policy, the last run, the lag, the remote
  backlog and queue age, deletions and 429s per minute over the last hour, the
  limiter's rate now, events pending and dead, and whether it is paused.
- ``GET  /retention/ui/dead-letters``: dead operations and dead events,
  filtered by policy, failure class and since when; users who may trigger
  ``retention__replay`` also see a form that starts it for the selection, for
  the policies whose own DAG (``retention__<policy>``) they may trigger.
- ``POST /retention/ui/dead-letters/replay``: starts one ``retention__replay``
  run per policy of the selection (403 for users who may not trigger it, or
  the DAG of a policy of the selection; 403 for a request from another origin,
  the CSRF guard).
- ``GET  /retention/ui/operations/{key}``: one operation's evidence record
  (what ``python -m retention.cli explain KEY`` prints).

Every page needs an Airflow login (the api-server's ``_token`` cookie, or a
bearer token); a browser without one is sent to Airflow's login page. A user
sees only the policies whose DAG Airflow lets them read. Figures are read from
each policy's database when the page is asked for, never at import.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import psycopg
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader

from retention.airflow.connections import api_base_url, postgres
from retention.db.gate import PAUSE_VARIABLE, switch_pauses
from retention.evidence.explain import UnknownOperation, explain
from retention.policy import Policy, PolicySet, load_policies
from retention.policy.model import DAG_ID_PREFIX
from retention.ui import formatting
from retention.ui.access import REPLAY_DAG_ID, Access, AirflowAccess, TriggerRefused
from retention.ui.queries import (
    DEAD_LETTER_LIMIT,
    DeadLetterFilter,
    PolicyFigures,
    dead_event_ids_by_policy,
    dead_events,
    dead_keys_by_policy,
    dead_letter_classes,
    dead_letters,
    policy_figures,
)

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"
OPERATION_KEY = re.compile(r"[0-9a-f]{64}")
EVENT_ID = re.compile(r"evt_[0-9a-f]{32}")
MAX_REPLAY_KEYS = 500  # operation keys one replay run is given


def templates() -> Jinja2Templates:
    """Jinja2 with autoescape on for every template (values come from the database)."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True)
    env.filters.update(formatting.FILTERS)
    return Jinja2Templates(env=env)


@dataclass(frozen=True)
class PolicyRow:
    """One policy on the overview: its figures, or why they could not be read."""

    policy: Policy
    figures: PolicyFigures | None
    error: str | None
    paused_by_variable: bool
    dag_paused: bool | None  # None: Airflow does not know the DAG (not parsed yet)


class ViewError(Exception):
    """A page that cannot be shown: rendered as a small page with the status code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def ui_router(access: Access | None = None) -> APIRouter:
    """The pages, for the plugin's app to include under ``/ui``."""
    access = access or AirflowAccess()
    pages = templates()
    router = APIRouter()

    async def login_or(request: Request) -> Any | Response:
        """The user, or where a browser without a login goes (401 page for non-GETs)."""
        user = await access.user(request)
        if user is not None:
            return user
        if request.method == "GET":
            return RedirectResponse(access.login_url(str(request.url)), status_code=303)
        return message(request, 401, "Log in to Airflow first, then come back to this page.")

    def message(request: Request, status: int, text: str) -> HTMLResponse:
        return pages.TemplateResponse(
            request, "message.html", {"status": status, "text": text}, status_code=status
        )

    def readable(user: Any, policies: PolicySet | None = None) -> list[Policy]:
        found = policies or load_policies()
        return [p for p in found.policies if access.may_read(user, p.dag_id)]

    @router.get("/", response_class=HTMLResponse, name="overview")
    async def overview(request: Request) -> Response:
        user = await login_or(request)
        if isinstance(user, Response):
            return user
        policy_set = load_policies()
        policies = readable(user, policy_set)
        rows = await run_in_threadpool(_overview_rows, access, policies)
        return pages.TemplateResponse(
            request,
            "overview.html",
            {
                "rows": rows,
                # a policy the file gets wrong has no DAG and no card: say why here
                "policy_problems": _policy_problems(access, user, policy_set),
                "user": access.user_name(user),
                "pause_variable": PAUSE_VARIABLE,
                "now": dt.datetime.now(dt.UTC),
            },
        )

    @router.get("/dead-letters", response_class=HTMLResponse, name="dead_letters")
    async def dead_letter_page(request: Request) -> Response:
        user = await login_or(request)
        if isinstance(user, Response):
            return user
        policies = readable(user)
        try:
            chosen = _filter(request.query_params, policies)
        except ViewError as bad:
            return message(request, bad.status, bad.message)
        found = await run_in_threadpool(_dead_letters, policies, chosen)
        return pages.TemplateResponse(
            request,
            "dead_letters.html",
            {
                "rows": found.operations,
                "events": found.events,
                "classes": found.classes,
                "errors": found.errors,
                "chosen": chosen,
                "remote_policies": [p.name for p in policies if p.remote],
                "replayable": _replayable(access, user, policies),
                "limit": DEAD_LETTER_LIMIT,
                "user": access.user_name(user),
                "started": request.query_params.getlist("started"),
            },
        )

    @router.post("/dead-letters/replay", name="replay")
    async def replay(request: Request) -> Response:
        user = await login_or(request)
        if isinstance(user, Response):
            return user
        if forbidden := _replay_forbidden(request, access, user):
            return message(request, 403, forbidden)
        form = await request.form()
        policies = [p for p in readable(user) if p.remote]
        try:
            confs = await run_in_threadpool(_replay_confs, form, policies, access.user_name(user))
            _refuse_unreplayable(confs, policies, _replayable(access, user, policies))
        except ViewError as bad:
            return message(request, bad.status, bad.message)
        note = f"Started from the Retention view by {access.user_name(user)}"
        started: list[str] = []
        for conf in confs:
            try:
                started.append(
                    await run_in_threadpool(access.trigger, REPLAY_DAG_ID, conf, user, note)
                )
            except TriggerRefused as refused:
                done = f" (already started: {', '.join(started)})" if started else ""
                return message(request, 409, f"{refused}{done}")
        shown = urlencode([("started", run_id) for run_id in started])
        return RedirectResponse(f"{request.url_for('dead_letters').path}?{shown}", status_code=303)

    @router.get("/operations/{key}", response_class=HTMLResponse, name="operation")
    async def operation(request: Request, key: str) -> Response:
        user = await login_or(request)
        if isinstance(user, Response):
            return user
        if not OPERATION_KEY.fullmatch(key):
            return message(request, 404, f"{key[:80]!r} is not an operation key (64 hex digits).")
        try:
            record = await run_in_threadpool(_find_operation, key, readable(user))
        except ViewError as missing:
            return message(request, missing.status, missing.message)
        return pages.TemplateResponse(
            request, "operation.html", {"record": record, "user": access.user_name(user)}
        )

    return router


def _policy_problems(access: Access, user: Any, policy_set: PolicySet) -> str:
    """What is wrong with the policies file, as far as ``user`` may know: the problems of
    the policies whose DAG they may read; the file's own error (it names no policy, and
    may quote any of it) only to users who may read every DAG."""
    if policy_set.file_error and not access.may_read_every_dag(user):
        return (
            "The policies file could not be read, so no policy is shown; a user who may read "
            "every DAG sees why here (and in Airflow's DAG import errors)."
        )
    return policy_set.error_report(
        shown=lambda name: access.may_read(user, f"{DAG_ID_PREFIX}{name}")
    )


def _replay_forbidden(request: Request, access: Access, user: Any) -> str | None:
    """Why this replay request is refused before its form is read, or None."""
    if not _same_origin(request):
        return (
            "This replay request did not come from this Airflow's own pages (its Origin "
            "header names another site, or none); open the dead-letter page and use its button."
        )
    if not access.may_trigger(user, REPLAY_DAG_ID):
        return f"You may not trigger the DAG {REPLAY_DAG_ID!r}; ask an admin."
    return None


def _replayable(access: Access, user: Any, policies: list[Policy]) -> list[str]:
    """The policies whose dead letters ``user`` may replay: those whose own DAG they may
    trigger, when they may trigger ``retention__replay`` too (the replay task asks the
    same of the user who triggered it)."""
    if not access.may_trigger(user, REPLAY_DAG_ID):
        return []
    return [p.name for p in policies if p.remote and access.may_trigger(user, p.dag_id)]


def _refuse_unreplayable(
    confs: list[dict[str, Any]], policies: list[Policy], replayable: list[str]
) -> None:
    """Refuse (403) the whole selection when a policy of it is not ``replayable``: start
    none of its runs rather than some."""
    asked = {conf["policy"] for conf in confs}
    refused = [p for p in policies if p.name in asked and p.name not in replayable]
    if refused:
        raise ViewError(
            403,
            " ".join(
                f"You may not trigger the DAG {p.dag_id!r}, and replaying the dead letters of "
                f"policy {p.name!r} needs that right (besides the right to trigger "
                f"{REPLAY_DAG_ID!r}); ask an admin."
                for p in refused
            ),
        )


def _by_database(policies: list[Policy]) -> dict[str, list[Policy]]:
    grouped: dict[str, list[Policy]] = defaultdict(list)
    for policy in policies:
        grouped[policy.postgres_conn_id].append(policy)
    return dict(sorted(grouped.items()))


def _overview_rows(access: Access, policies: list[Policy]) -> list[PolicyRow]:
    now = dt.datetime.now(dt.UTC)
    switch = _read_switch(access)
    paused = access.paused_dags([p.dag_id for p in policies])
    figures: dict[str, PolicyFigures | str] = {}
    for conn_id, members in _by_database(policies).items():
        try:
            with postgres(conn_id) as conn:
                for policy in members:
                    try:
                        figures[policy.name] = policy_figures(conn, policy, now)
                    except psycopg.Error as failed:
                        figures[policy.name] = _why(failed)
        except (psycopg.Error, OSError) as unreachable:
            log.warning("retention view: connection %s failed: %s", conn_id, unreachable)
            for policy in members:
                figures[policy.name] = f"connection {conn_id!r}: {unreachable}"
    rows = []
    for policy in policies:
        found = figures[policy.name]
        rows.append(
            PolicyRow(
                policy=policy,
                figures=found if isinstance(found, PolicyFigures) else None,
                error=found if isinstance(found, str) else None,
                paused_by_variable=switch_pauses(switch, policy.name),
                dag_paused=paused.get(policy.dag_id),
            )
        )
    return rows


def _read_switch(access: Access) -> str | None:
    try:
        return access.pause_switch()
    except Exception as unreadable:  # the page still shows everything else
        log.warning("retention view: could not read %s: %s", PAUSE_VARIABLE, unreadable)
        return None


def _why(failed: psycopg.Error) -> str:
    if isinstance(failed, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName):
        return f"no retention ledger or table yet ({failed.diag.message_primary})"
    return f"{type(failed).__name__}: {failed}"


def _filter(params: Any, policies: list[Policy]) -> DeadLetterFilter:
    policy = params.get("policy") or None
    if policy is not None and policy not in {p.name for p in policies}:
        raise ViewError(404, f"no policy {policy!r} that you may read")
    since_text = params.get("since") or None
    since = None
    if since_text:
        try:
            since = dt.datetime.fromisoformat(since_text)
        except ValueError:
            raise ViewError(
                400, f"since: {since_text!r} is not a date or time such as 2026-03-01T12:00"
            ) from None
        since = since if since.tzinfo else since.replace(tzinfo=dt.UTC)
    return DeadLetterFilter(policy, params.get("failure_class") or None, since)


@dataclass(frozen=True)
class DeadLetters:
    """What the dead-letter page lists, from every database of the readable policies."""

    operations: list[dict[str, Any]]
    events: list[dict[str, Any]]
    classes: list[dict[str, Any]]  # kind, policy, failure_class, n
    errors: list[str]  # databases that could not be read, and why


def _dead_letters(policies: list[Policy], chosen: DeadLetterFilter) -> DeadLetters:
    found = DeadLetters([], [], [], [])
    for conn_id, members in _by_database([p for p in policies if p.remote]).items():
        names = [p.name for p in members]
        try:
            with postgres(conn_id) as conn:
                found.operations.extend(dead_letters(conn, names, chosen))
                found.events.extend(dead_events(conn, names, chosen))
                found.classes.extend(dead_letter_classes(conn, names))
        except (psycopg.Error, OSError) as failed:
            found.errors.append(f"connection {conn_id!r}: {failed}")
    found.operations.sort(key=lambda row: (row["dead_since"], row["operation_key"]), reverse=True)
    found.events.sort(key=lambda row: (row["dead_since"], row["event_id"]), reverse=True)
    return found


def _replay_confs(form: Any, policies: list[Policy], user_name: str) -> list[dict[str, Any]]:
    """The conf of each ``retention__replay`` run the form asks for (one per policy).

    ``scope=selected`` replays the ticked operation keys that are dead operations
    of policies the user may read; ``scope=filter`` replays every dead operation
    of one policy with one failure class (optionally dead since a time), as the
    DAG's own ``failure_class`` param does.
    """
    typed = (form.get("reason") or "").strip()
    reason = typed or f"replayed from the Retention view by {user_name}"
    if form.get("scope") == "filter":
        chosen = _filter(form, policies)
        if chosen.policy is None or chosen.failure_class is None:
            raise ViewError(400, "to replay by filter, choose a policy and a failure class")
        return [
            {
                "kind": "operations",
                "policy": chosen.policy,
                "failure_class": chosen.failure_class,
                "since": chosen.since.isoformat() if chosen.since else None,
                "operation_keys": [],
                "reason": reason,
            }
        ]
    if form.get("scope") == "events":
        return _ticked_confs(
            form,
            policies,
            TickedKind("events", "event_id", EVENT_ID, "event_ids", dead_event_ids_by_policy),
            reason,
        )
    return _ticked_confs(
        form,
        policies,
        TickedKind(
            "operations", "operation_key", OPERATION_KEY, "operation_keys", dead_keys_by_policy
        ),
        reason,
    )


@dataclass(frozen=True)
class TickedKind:
    """What the replay form's ticked boxes name: dead operations or dead events."""

    kind: str  # retention__replay's ``kind`` param, and the word in messages
    field: str  # the form field of each ticked box
    pattern: re.Pattern[str]  # what a value must look like (anything else is ignored)
    conf_key: str  # the replay param that takes the chosen ones
    dead_by_policy: Callable[[Any, list[str], list[str]], dict[str, list[str]]]


def _ticked_confs(
    form: Any, policies: list[Policy], ticked: TickedKind, reason: str
) -> list[dict[str, Any]]:
    """One replay conf per policy for the ticked boxes that are still dead letters of
    policies the user may read."""
    chosen = sorted({v for v in form.getlist(ticked.field) if ticked.pattern.fullmatch(v)})
    if not chosen:
        hint = " (or replay by filter)" if ticked.kind == "operations" else ""
        raise ViewError(400, f"tick the dead {ticked.kind} to replay{hint}")
    if len(chosen) > MAX_REPLAY_KEYS:
        hint = "; replay by filter" if ticked.kind == "operations" else ""
        raise ViewError(400, f"at most {MAX_REPLAY_KEYS} {ticked.kind} at once{hint}")
    grouped: dict[str, list[str]] = {}
    for conn_id, members in _by_database(policies).items():
        with postgres(conn_id) as conn:
            grouped.update(ticked.dead_by_policy(conn, chosen, [p.name for p in members]))
    if not grouped:
        raise ViewError(404, f"none of the ticked {ticked.kind} is dead any more (or yours to see)")
    return [
        {"kind": ticked.kind, "policy": policy, ticked.conf_key: keys, "reason": reason}
        for policy, keys in sorted(grouped.items())
    ]


def _same_origin(request: Request) -> bool:
    """The CSRF guard: a browser names the page a POST came from in ``Origin`` (or at
    least ``Referer``); it must be this server: the host it was asked for, or, behind
    a proxy that rewrites that, the forwarded host or the host of Airflow's
    ``[api] base_url``."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return False
    ours = {
        request.headers.get("host"),
        request.headers.get("x-forwarded-host"),
        urlsplit(api_base_url() or "").netloc or None,
    }
    return urlsplit(source).netloc in ours - {None}


def _find_operation(key: str, policies: list[Policy]) -> dict[str, Any]:
    readable = {p.name for p in policies}
    for conn_id in sorted({p.postgres_conn_id for p in policies if p.remote}):
        try:
            with postgres(conn_id) as conn:
                record = explain(conn, key)
        except UnknownOperation:
            continue
        except psycopg.Error as failed:
            log.warning("retention view: evidence lookup in %s failed: %s", conn_id, failed)
            continue
        if record["selected"]["policy"] in readable:
            return record
    raise ViewError(404, f"no operation with key {key!r} in a policy you may read")
