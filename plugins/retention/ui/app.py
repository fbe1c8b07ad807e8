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
- ``POST /retention/ui/replay-dag/unpause``: unpauses ``retention__replay``
  (paused, a run started from the view would wait queued for ever), through
  Airflow's DAG model as ``PATCH /dags/{dag_id}`` does (403 for users who may not
  edit that DAG, and for a request from another origin). Every page that starts
  a run says when the DAG is paused, with this button for users who may.
- ``POST /retention/ui/dead-letters/discard``: records the ticked dead operations as
  reviewed and discarded (``retention.discards``: who, when, the note typed), with
  the replay's right and guard (:mod:`retention.evidence.discard` says what a
  discard changes, and how it is undone: by a recorded replay).
- ``GET  /retention/ui/holds``: legal holds of the policies the user may read (and
  every-policy holds), with a form to place one and a button to lift each, for users
  who may trigger the policies' DAGs; ``POST /retention/ui/holds/place`` and
  ``POST /retention/ui/holds/{id}/lift`` follow the JSON API's rules
  (:mod:`retention.airflow.hold_actions`) behind the same origin guard as a replay.
- ``GET  /retention/ui/operations/{key}``: one operation's evidence record
  (what ``python -m retention.cli explain KEY`` prints), found and refused (404,
  503) exactly as the JSON API does it: :func:`retention.airflow.lookup.find_operation`.

Every page needs an Airflow login (the api-server's ``_token`` cookie, or a
bearer token), checked by one FastAPI dependency on the router; a browser
without one is sent to Airflow's login page. A user sees only the policies
whose DAG Airflow lets them read. Figures are read from each policy's database
when the page is asked for, never at import, through
:func:`retention.airflow.lookup.read_each_database`, which names a database that
did not answer. :func:`create_app` is the plugin's whole app: the JSON API of
:mod:`retention.airflow.api` with these pages under ``/ui``.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import psycopg
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader

from retention.airflow import hold_actions
from retention.airflow.access import (
    REPLAY_DAG_ID,
    Access,
    AirflowAccess,
    FutureRun,
    TriggerRefused,
)
from retention.airflow.api import create_app as create_api
from retention.airflow.connections import api_base_url
from retention.airflow.lookup import (
    NO_LEDGER,
    OPERATION_KEY,
    LookupRefused,
    find_operation,
    read_each_database,
)
from retention.alerts.messages import RUNBOOK, RUNBOOK_PAGE
from retention.db.connection import Connection
from retention.db.gate import PAUSE_VARIABLE, switch_pauses
from retention.erasures.request import ERASURE_DAG_ID
from retention.evidence.discard import discard_dead
from retention.policy import Policy, PolicySet, load_policies
from retention.policy.model import DAG_ID_PREFIX
from retention.rows.cutoff import future_run_note
from retention.ui import formatting
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
    table_check,
)

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"
EVENT_ID = re.compile(r"evt_[0-9a-f]{32}")
MAX_REPLAY_KEYS = 500  # operation keys one replay run is given


def templates() -> Jinja2Templates:
    """Jinja2 with autoescape on for every template (values come from the database)."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True)
    env.filters.update(formatting.FILTERS)
    return Jinja2Templates(env=env)


@dataclass(frozen=True)
class PolicyRow:
    """One policy on the overview: its figures, or why they could not be read (its table
    does not fit it, or its database did not answer)."""

    policy: Policy
    figures: PolicyFigures | None
    error: str | None
    paused_by_variable: bool
    dag_paused: bool | None  # None: Airflow does not know the DAG (not parsed yet)
    table_problems: tuple[str, ...] = ()  # what its run's first task would refuse
    run_states: dict[str, str] = field(default_factory=dict)  # Airflow's state by run id
    future_runs: list[str] = field(default_factory=list)  # runs Airflow will not start yet


class ViewError(Exception):
    """A page that cannot be shown: rendered as a small page with the status code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ReplayPaused(ViewError):
    """A replay asked for while ``retention__replay`` is paused: its run would wait queued
    for ever, so none is started; the page offers the unpause button to who may use it."""

    def __init__(self, may_unpause: bool) -> None:
        super().__init__(409, replay_paused_text(may_unpause))
        self.may_unpause = may_unpause


def replay_paused_text(may_unpause: bool) -> str:
    """What a page that starts replays says while the replay DAG is paused."""
    then = (
        "unpause it here (it runs only when triggered), then replay."
        if may_unpause
        else "ask someone who may edit that DAG in Airflow to unpause it."
    )
    return (
        f"The DAG {REPLAY_DAG_ID!r} is paused, so a replay started here would stay queued "
        f"and never run: no run was started; {then}"
    )


class LoginNeeded(ViewError):
    """No Airflow login: a browser asking for a page goes to Airflow's login page, any
    other request gets a 401 page."""

    def __init__(self) -> None:
        super().__init__(401, "Log in to Airflow first, then come back to this page.")


def login_dependency(access: Access) -> Callable[[Request], Awaitable[Any]]:
    """The login guard of every page, a FastAPI dependency (as the JSON API's is): the
    logged-in user, or :class:`LoginNeeded`."""

    async def logged_in(request: Request) -> Any:
        user = await access.user(request)
        if user is None:
            raise LoginNeeded
        return user

    return logged_in


def page_route(access: Access, message: Callable[..., Response]) -> type[APIRoute]:
    """The route class of the pages: a :class:`ViewError` raised by a page or by one of
    its dependencies is answered as a small page with its status (a missing login as a
    redirect to Airflow's login page, for GETs), never as JSON."""

    class PageRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def answer(request: Request) -> Response:
                try:
                    return await handler(request)
                except LoginNeeded as missing:
                    if request.method == "GET":
                        return RedirectResponse(access.login_url(str(request.url)), 303)
                    return message(request, missing.status, missing.message)
                except ReplayPaused as paused:
                    return message(
                        request, paused.status, paused.message, may_unpause=paused.may_unpause
                    )
                except ViewError as refused:
                    return message(request, refused.status, refused.message)

            return answer

    return PageRoute


def create_app(
    *,
    airflow_auth: bool = True,
    authorize: Callable[[Any, str], bool] | None = None,
    ui_access: Access | None = None,
) -> FastAPI:
    """The plugin's app: the JSON API of :mod:`retention.airflow.api` and, under ``/ui``,
    the pages. ``authorize`` stands in for the auth manager's DAG permission and
    ``ui_access`` for the pages' questions to Airflow where no auth manager runs (tests)."""
    app = create_api(airflow_auth=airflow_auth, authorize=authorize)
    app.include_router(ui_router(ui_access), prefix="/ui")
    return app


def ui_router(access: Access | None = None) -> APIRouter:
    """The pages, for the plugin's app to include under ``/ui``."""
    access = access or AirflowAccess()
    pages = templates()

    def message(
        request: Request, status: int, text: str, may_unpause: bool = False
    ) -> HTMLResponse:
        return pages.TemplateResponse(
            request,
            "message.html",
            {"status": status, "text": text, "may_unpause": may_unpause},
            status_code=status,
        )

    logged_in = login_dependency(access)
    # every route of the router needs the login; the same dependency (FastAPI solves it
    # once per request) gives the pages the user
    router = APIRouter(route_class=page_route(access, message), dependencies=[Depends(logged_in)])
    user_of_request = Depends(logged_in)

    def readable(user: Any, policies: PolicySet | None = None) -> list[Policy]:
        found = policies or load_policies()
        return [p for p in found.policies if access.may_read(user, p.dag_id)]

    @router.get("/", response_class=HTMLResponse, name="overview")
    async def overview(request: Request, user: Any = user_of_request) -> Response:
        policy_set = load_policies()
        policies = readable(user, policy_set)
        rows = await run_in_threadpool(_overview_rows, access, policies)
        # the erasure DAG works one pass at a time: a run of it that Airflow will not
        # start before its logical date stops every pass (and every erasure) until then
        erasure_runs = (
            await run_in_threadpool(_future_notes, access, ERASURE_DAG_ID)
            if access.may_read(user, ERASURE_DAG_ID)
            else []
        )
        return pages.TemplateResponse(
            request,
            "overview.html",
            {
                "rows": rows,
                "erasure_dag_id": ERASURE_DAG_ID,
                "erasure_future_runs": erasure_runs,
                # a policy the file gets wrong has no DAG and no card: say why here
                "policy_problems": _policy_problems(access, user, policy_set),
                "user": access.user_name(user),
                "pause_variable": PAUSE_VARIABLE,
                "now": dt.datetime.now(dt.UTC),
                # a dirty run's next step: the runbook section the dirty-run alert names
                "runbook_page": RUNBOOK_PAGE,
                "dirty_step": RUNBOOK["dirty"],
                # ... and when dead letters are what keeps it dirty, that section's
                "dead_step": RUNBOOK["dead_letters"],
            },
        )

    @router.get("/dead-letters", response_class=HTMLResponse, name="dead_letters")
    async def dead_letter_page(request: Request, user: Any = user_of_request) -> Response:
        policies = readable(user)
        chosen = _filter(request.query_params, policies)
        found = await run_in_threadpool(_dead_letters, policies, chosen)
        may_unpause = access.may_edit(user, REPLAY_DAG_ID)
        # a replay run Airflow will not start before its logical date replays nothing;
        # named only to who may read the replay DAG (as the overview does the erasure DAG's)
        replay_runs = (
            await run_in_threadpool(_future_notes, access, REPLAY_DAG_ID)
            if access.may_read(user, REPLAY_DAG_ID)
            else []
        )
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
                "replay_paused": await run_in_threadpool(_replay_paused, access),
                "replay_future_runs": replay_runs,
                "may_unpause": may_unpause,
                "replay_paused_text": replay_paused_text(may_unpause),
                "unpaused": request.query_params.get("unpaused") == REPLAY_DAG_ID,
                "limit": DEAD_LETTER_LIMIT,
                "user": access.user_name(user),
                "started": request.query_params.getlist("started"),
                "discarded_now": request.query_params.get("discarded_now"),
            },
        )

    _dead_letter_actions(router, access, readable, user_of_request)
    _hold_pages(router, access, pages, readable, user_of_request)

    @router.get("/operations/{key}", response_class=HTMLResponse, name="operation")
    async def operation(request: Request, key: str, user: Any = user_of_request) -> Response:
        def may_read(dag_id: str) -> bool:
            return access.may_read(user, dag_id)

        policies = load_policies().policies
        try:
            record = await run_in_threadpool(find_operation, key, policies, may_read)
        except LookupRefused as refused:  # the JSON API's answer, as a page
            raise ViewError(refused.status, refused.message) from None
        return pages.TemplateResponse(
            request, "operation.html", {"record": record, "user": access.user_name(user)}
        )

    return router


def _dead_letter_actions(
    router: APIRouter,
    access: Access,
    readable: Callable[[Any], list[Policy]],
    user_of_request: Any,
) -> None:
    """The dead-letter page's three posts: replay, discard, and unpausing the replay DAG."""

    @router.post("/dead-letters/replay", name="replay")
    async def replay(request: Request, user: Any = user_of_request) -> Response:
        if forbidden := _replay_forbidden(request, access, user):
            raise ViewError(403, forbidden)
        form = await request.form()
        policies = [p for p in readable(user) if p.remote]
        confs = await run_in_threadpool(_replay_confs, form, policies, access.user_name(user))
        _refuse_unreplayable(confs, policies, _replayable(access, user, policies))
        if await run_in_threadpool(_replay_paused, access):
            raise ReplayPaused(access.may_edit(user, REPLAY_DAG_ID))
        note = f"Started from the Retention view by {access.user_name(user)}"
        started: list[str] = []
        for conf in confs:
            try:
                started.append(
                    await run_in_threadpool(access.trigger, REPLAY_DAG_ID, conf, user, note)
                )
            except TriggerRefused as refused:
                done = f" (already started: {', '.join(started)})" if started else ""
                raise ViewError(409, f"{refused}{done}") from refused
        shown = urlencode([("started", run_id) for run_id in started])
        return RedirectResponse(f"{request.url_for('dead_letters').path}?{shown}", status_code=303)

    @router.post("/replay-dag/unpause", name="unpause_replay")
    async def unpause_replay(request: Request, user: Any = user_of_request) -> Response:
        if forbidden := _unpause_forbidden(request, access, user):
            raise ViewError(403, forbidden)
        try:
            await run_in_threadpool(access.unpause, REPLAY_DAG_ID, user)
        except TriggerRefused as refused:
            raise ViewError(409, str(refused)) from refused
        shown = urlencode([("unpaused", REPLAY_DAG_ID)])
        return RedirectResponse(f"{request.url_for('dead_letters').path}?{shown}", status_code=303)

    @router.post("/dead-letters/discard", name="discard")
    async def discard(request: Request, user: Any = user_of_request) -> Response:
        """Discarding needs what replaying needs (the same guard, the same rights): it
        decides the fate of the same dead letters, the other way."""
        if forbidden := _replay_forbidden(request, access, user, DISCARD):
            raise ViewError(403, forbidden)
        form = await request.form()
        policies = [p for p in readable(user) if p.remote]
        confs = await run_in_threadpool(
            _ticked_confs, form, policies, TICKED_OPERATIONS, "", DISCARD
        )
        _refuse_unreplayable(confs, policies, _replayable(access, user, policies), DISCARD)
        recorded = await run_in_threadpool(
            _record_discards, confs, policies, access.user_name(user), form.get("reason")
        )
        shown = urlencode([("discarded_now", recorded)])
        return RedirectResponse(f"{request.url_for('dead_letters').path}?{shown}", status_code=303)


def _hold_pages(
    router: APIRouter,
    access: Access,
    pages: Jinja2Templates,
    readable: Callable[[Any], list[Policy]],
    user_of_request: Any,
) -> None:
    """The legal holds page and its two posts (place, lift)."""

    @router.get("/holds", response_class=HTMLResponse, name="holds")
    async def holds_page(request: Request, user: Any = user_of_request) -> Response:
        policies = readable(user)
        holds, unanswered = await run_in_threadpool(hold_actions.listing, policies, lambda _d: True)
        placeable = [p.name for p in policies if access.may_trigger(user, p.dag_id)]
        every = load_policies().policies
        return pages.TemplateResponse(
            request,
            "holds.html",
            {
                "holds": holds,
                "unanswered": unanswered,
                "placeable": placeable,
                "all_placeable": bool(every)
                and all(access.may_trigger(user, p.dag_id) for p in every),
                "placed_now": request.query_params.get("placed_now"),
                "lifted_now": request.query_params.get("lifted_now"),
                "user": access.user_name(user),
            },
        )

    def guarded(request: Request) -> None:
        if not _same_origin(request):
            raise ViewError(
                403,
                "This hold request did not come from this Airflow's own pages (its Origin "
                "header names another site, or none); open the legal holds page and use it.",
            )

    @router.post("/holds/place", name="place_hold")
    async def place_hold_post(request: Request, user: Any = user_of_request) -> Response:
        guarded(request)
        form = await request.form()
        body = {k: form.get(k) for k in ("policy", "match", "value", "reason")}
        try:
            placed = await run_in_threadpool(
                hold_actions.place,
                load_policies().policies,
                body,
                access.user_name(user),
                lambda d: access.may_trigger(user, d),
            )
        except LookupRefused as refused:
            raise ViewError(refused.status, refused.message) from None
        shown = urlencode([("placed_now", ", ".join(str(h["id"]) for h in placed))])
        return RedirectResponse(f"{request.url_for('holds').path}?{shown}", status_code=303)

    @router.post("/holds/{hold_id}/lift", name="lift_hold")
    async def lift_hold_post(
        request: Request, hold_id: int, user: Any = user_of_request
    ) -> Response:
        guarded(request)
        form = await request.form()
        try:
            lifted = await run_in_threadpool(
                hold_actions.lift,
                load_policies().policies,
                hold_id,
                form.get("reason"),
                access.user_name(user),
                lambda d: access.may_trigger(user, d),
                lambda d: access.may_read(user, d),
            )
        except LookupRefused as refused:
            raise ViewError(refused.status, refused.message) from None
        shown = urlencode([("lifted_now", lifted["id"])])
        return RedirectResponse(f"{request.url_for('holds').path}?{shown}", status_code=303)


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


REPLAY, DISCARD = "replay", "discard"  # the dead-letter page's two actions


def _replay_forbidden(
    request: Request, access: Access, user: Any, action: str = REPLAY
) -> str | None:
    """Why this replay (or discard) request is refused before its form is read, or None."""
    if not _same_origin(request):
        return (
            f"This {action} request did not come from this Airflow's own pages (its Origin "
            "header names another site, or none); open the dead-letter page and use its button."
        )
    if not access.may_trigger(user, REPLAY_DAG_ID):
        needs = "" if action == REPLAY else " (discarding dead letters needs the replay's right)"
        return f"You may not trigger the DAG {REPLAY_DAG_ID!r}{needs}; ask an admin."
    return None


CROSS_ORIGIN = (
    "This request did not come from this Airflow's own pages (its Origin header names "
    "another site, or none); open the dead-letter page and use its button."
)


def _unpause_forbidden(request: Request, access: Access, user: Any) -> str | None:
    """Why this request to unpause ``retention__replay`` is refused, or None."""
    if not _same_origin(request):
        return CROSS_ORIGIN
    if not access.may_edit(user, REPLAY_DAG_ID):
        return (
            f"You may not unpause the DAG {REPLAY_DAG_ID!r} (that needs Airflow's right to "
            "edit it); ask someone who may to unpause it in Airflow."
        )
    return None


def _replay_paused(access: Access) -> bool:
    """Is ``retention__replay`` paused (a run started now would wait queued for ever)?"""
    return bool(access.paused_dags([REPLAY_DAG_ID]).get(REPLAY_DAG_ID))


def _replayable(access: Access, user: Any, policies: list[Policy]) -> list[str]:
    """The policies whose dead letters ``user`` may replay: those whose own DAG they may
    trigger, when they may trigger ``retention__replay`` too (the replay task asks the
    same of the user who triggered it)."""
    if not access.may_trigger(user, REPLAY_DAG_ID):
        return []
    return [p.name for p in policies if p.remote and access.may_trigger(user, p.dag_id)]


def _refuse_unreplayable(
    confs: list[dict[str, Any]], policies: list[Policy], replayable: list[str], action: str = REPLAY
) -> None:
    """Refuse (403) the whole selection when a policy of it is not ``replayable``: start
    none of its runs (record none of its discards) rather than some."""
    doing = "replaying" if action == REPLAY else "discarding"
    asked = {conf["policy"] for conf in confs}
    refused = [p for p in policies if p.name in asked and p.name not in replayable]
    if refused:
        raise ViewError(
            403,
            " ".join(
                f"You may not trigger the DAG {p.dag_id!r}, and {doing} the dead letters of "
                f"policy {p.name!r} needs that right (besides the right to trigger "
                f"{REPLAY_DAG_ID!r}); ask an admin."
                for p in refused
            ),
        )


# One policy's card: its figures, its table's problems, or why they could not be read.
Figures = PolicyFigures | tuple[str, ...] | str


def _overview_rows(access: Access, policies: list[Policy]) -> list[PolicyRow]:
    now = dt.datetime.now(dt.UTC)
    switch = _read_switch(access)
    paused = access.paused_dags([p.dag_id for p in policies])
    future = _future_runs(access, [p.dag_id for p in policies], now)

    def figures_of(conn: Connection, members: list[Policy]) -> dict[str, Figures]:
        figures: dict[str, Figures] = {}
        for policy in members:
            try:
                # a table that lacks a column its policy names (or whose children: do not
                # fit) has no figures: say why (a missing table is told by the figures' own
                # error: no table yet)
                fit = table_check(conn, policy)
                figures[policy.name] = (
                    tuple(fit.problems)
                    if fit.exists and not fit.fits
                    else policy_figures(conn, policy, now)
                )
            except psycopg.Error as failed:  # a locked table fails its card, not the page
                figures[policy.name] = _why(failed)
        return figures

    read = read_each_database(policies, figures_of, what="retention view")
    found: dict[str, Figures] = {}
    for figures in read.answers.values():
        found.update(figures)
    rows = []
    for policy in policies:
        figures = found.get(policy.name)
        if figures is None:  # its database did not answer
            conn_id = policy.postgres_conn_id
            figures = f"connection {conn_id!r}: {read.unanswered[conn_id]}"
        states = _run_states(access, figures) if isinstance(figures, PolicyFigures) else {}
        rows.append(
            PolicyRow(
                policy=policy,
                figures=figures if isinstance(figures, PolicyFigures) else None,
                error=figures if isinstance(figures, str) else None,
                paused_by_variable=switch_pauses(switch, policy.name),
                dag_paused=paused.get(policy.dag_id),
                table_problems=figures if isinstance(figures, tuple) else (),
                run_states=states,
                future_runs=[
                    future_run_note(run.run_id, run.logical_date, now)
                    for run in future
                    if run.dag_id == policy.dag_id
                ],
            )
        )
    return rows


def _run_states(access: Access, figures: PolicyFigures) -> dict[str, str]:
    """Airflow's state of the runs a card shows (by run id): whether a run the ledger has
    as planned is running or stopped. Unreadable, the card falls back on the run lease."""
    runs = [r for r in (figures.last_run, figures.last_finished, figures.last_dry_run) if r]
    states: dict[str, str] = {}
    try:
        for dag_id in sorted({run.dag_id for run in runs}):
            states.update(
                access.run_states(dag_id, [run.run_id for run in runs if run.dag_id == dag_id])
            )
    except Exception as unreadable:  # the page still shows everything else
        log.warning("retention view: could not read the runs' states: %s", unreadable)
    return states


def _future_runs(access: Access, dag_ids: list[str], now: dt.datetime) -> list[FutureRun]:
    """Runs Airflow will not start before their logical date (none when it cannot say)."""
    try:
        return access.future_runs(dag_ids, now)
    except Exception as unreadable:  # the page still shows everything else
        log.warning("retention view: could not read the DAG runs: %s", unreadable)
        return []


def _future_notes(access: Access, dag_id: str) -> list[str]:
    """The runs of one DAG that Airflow will not start before their logical date, each
    with its date and the fix (as a policy's card names its own)."""
    now = dt.datetime.now(dt.UTC)
    return [
        future_run_note(run.run_id, run.logical_date, now)
        for run in _future_runs(access, [dag_id], now)
    ]


def _read_switch(access: Access) -> str | None:
    try:
        return access.pause_switch()
    except Exception as unreadable:  # the page still shows everything else
        log.warning("retention view: could not read %s: %s", PAUSE_VARIABLE, unreadable)
        return None


def _why(failed: psycopg.Error) -> str:
    if isinstance(failed, NO_LEDGER):
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
    discarded = params.get("discarded") in ("1", "on", "true")
    return DeadLetterFilter(policy, params.get("failure_class") or None, since, discarded)


@dataclass(frozen=True)
class DeadLetters:
    """What the dead-letter page lists, from every database of the readable policies."""

    operations: list[dict[str, Any]]
    events: list[dict[str, Any]]
    classes: list[dict[str, Any]]  # kind, policy, failure_class, n
    errors: list[str]  # databases that could not be read, and why


def _dead_letters(policies: list[Policy], chosen: DeadLetterFilter) -> DeadLetters:
    def lists(conn: Connection, members: list[Policy]) -> DeadLetters:
        names = [p.name for p in members]
        return DeadLetters(
            dead_letters(conn, names, chosen),
            dead_events(conn, names, chosen),
            dead_letter_classes(conn, names),
            [],
        )

    read = read_each_database([p for p in policies if p.remote], lists, what="retention view")
    found = DeadLetters([], [], [], read.problems())
    for part in read.answers.values():
        found.operations.extend(part.operations)
        found.events.extend(part.events)
        found.classes.extend(part.classes)
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
    return _ticked_confs(form, policies, TICKED_OPERATIONS, reason)


def _record_discards(
    confs: list[dict[str, Any]], policies: list[Policy], user_name: str, note: Any
) -> int:
    """Record the discards of ``confs`` (ticked dead operations, by policy) in each
    policy's database; how many were recorded (an operation discarded already, or
    replayed meanwhile, is not). A database that does not answer is a 503 naming it."""
    keys = {conf["policy"]: conf["operation_keys"] for conf in confs}
    chosen = [p for p in policies if p.name in keys]

    def record(conn: Connection, members: list[Policy]) -> int:
        names = [p.name for p in members]
        return len(
            discard_dead(
                conn,
                operation_keys=[k for name in names for k in keys[name]],
                policies=names,
                discarded_by=user_name,
                note=str(note) if note else None,
            )
        )

    done = read_each_database(chosen, record, what="retention view discard")
    if done.unanswered:
        raise ViewError(
            503,
            f"recorded {sum(done.answers.values())} discard(s), but not those of: "
            + "; ".join(done.problems()),
        )
    return sum(done.answers.values())


@dataclass(frozen=True)
class TickedKind:
    """What the replay form's ticked boxes name: dead operations or dead events."""

    kind: str  # retention__replay's ``kind`` param, and the word in messages
    field: str  # the form field of each ticked box
    pattern: re.Pattern[str]  # what a value must look like (anything else is ignored)
    conf_key: str  # the replay param that takes the chosen ones
    dead_by_policy: Callable[[Any, list[str], list[str]], dict[str, list[str]]]


TICKED_OPERATIONS = TickedKind(
    "operations", "operation_key", OPERATION_KEY, "operation_keys", dead_keys_by_policy
)


def _ticked_confs(
    form: Any, policies: list[Policy], ticked: TickedKind, reason: str, action: str = REPLAY
) -> list[dict[str, Any]]:
    """One replay conf per policy for the ticked boxes that are still dead letters of
    policies the user may read (a discard uses its policy and keys)."""
    chosen = sorted({v for v in form.getlist(ticked.field) if ticked.pattern.fullmatch(v)})
    by_filter = ticked.kind == "operations" and action == REPLAY
    if not chosen:
        hint = " (or replay by filter)" if by_filter else ""
        raise ViewError(400, f"tick the dead {ticked.kind} to {action}{hint}")
    if len(chosen) > MAX_REPLAY_KEYS:
        hint = "; replay by filter" if by_filter else ""
        raise ViewError(400, f"at most {MAX_REPLAY_KEYS} {ticked.kind} at once{hint}")
    read = read_each_database(
        policies,
        lambda conn, members: ticked.dead_by_policy(conn, chosen, [p.name for p in members]),
        what="retention view replay",
    )
    if read.unanswered:  # start none rather than the runs of the databases that answered
        raise ViewError(
            503,
            f"could not check that the ticked {ticked.kind} are still dead: "
            + "; ".join(read.problems()),
        )
    grouped: dict[str, list[str]] = {}
    for dead in read.answers.values():
        grouped.update(dead)
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
