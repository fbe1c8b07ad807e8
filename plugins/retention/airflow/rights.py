"""Who may replay a policy's dead letters, asked of Airflow's auth manager.

A ``retention__replay`` run acts on the policy named in its conf, so the right
to trigger ``retention__replay`` alone would let anyone replay any policy. A
replay therefore also needs the right the policy's own DAG guards: to trigger
``retention__<policy>`` (create a run of it, what ``POST /dags/{dag_id}/dagRuns``
requires). It is checked where the user is known and again where the work is done:

- on the api-server, for every auth manager: the replay guard
  (:mod:`retention.airflow.replay_guard`) answers 403 to a request creating a
  ``retention__replay`` run for a policy whose DAG its user may not trigger,
  and the Retention view asks the same before it starts a run;
- in the replay task, which knows the user who triggered the run only by name
  (``dag_run.triggering_user_name``) and looks the name up in the auth manager
  when it can: Airflow's simple auth manager, or a configured lookup.

The task's rule (:func:`replay_verdict`, a pure function) fails closed where it
can judge: no user, or a user the auth manager does not know, is a refusal.
Where it cannot (FAB and the managed deployments' auth managers look users up
only inside a request, and Airflow 3 closes the metadata database to tasks),
a ``manual`` run with a user name was created through the api-server, whose
guard checked that user's right at trigger time: it may replay. Runs no user
triggered, and runs of other types (backfills, another DAG's operator), stay
refused. ``airflow dags test`` (``dag.test()``), which names its runs' user
``dag_test``, may replay: whoever runs it has the deployment's metadata
database and DAG files, more than any auth manager right.

Airflow is imported inside the functions (the api-server and the workers
have it; the pure rule is tested without an auth manager).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from retention.policy.model import DAG_ID_PREFIX

DAG_TEST_USER = "dag_test"  # the triggering user Airflow's dag.test() gives every run it makes
USER_LOOKUP_ENV = "RETENTION_REPLAY_USER_LOOKUP"  # "module:function" for other auth managers
MANUAL_RUN = "manual"  # DagRunType.MANUAL: the run type of the api-server's trigger (and the CLI's)

log = logging.getLogger(__name__)

UserLookup = Callable[[Any, str], Any | None]


class LookupUnavailable(LookupError):
    """The auth manager cannot name a user outside a request, and no lookup is configured."""


class LookupMisconfigured(LookupError):
    """``$RETENTION_REPLAY_USER_LOOKUP`` names no function: a configuration error, never a
    reason to rely on the api-server's guard instead."""


@dataclass(frozen=True)
class Triggerer:
    """What the auth manager said about the user who triggered a replay run."""

    name: str | None  # dag_run.triggering_user_name
    manager: str  # the auth manager's class name, for messages
    found: bool = False  # the auth manager knows a user by this name
    may_trigger: bool = False  # ... and lets that user trigger the policy's DAG
    unavailable: str | None = None  # why the name could not be looked up at all
    run_type: str | None = (
        None  # dag_run.run_type ("manual", "backfill", "operator_triggered", ...)
    )


@dataclass(frozen=True)
class Verdict:
    """May the run replay? ``reason`` says why (the refusal's message, or what allowed it)."""

    allowed: bool
    reason: str


def replay_verdict(policy: str, triggerer: Triggerer) -> Verdict:
    """May ``triggerer``'s run replay ``policy``'s dead letters, and why."""
    refusal = _refusal(policy, triggerer)
    if refusal is not None:
        return Verdict(False, refusal)
    dag_id = f"{DAG_ID_PREFIX}{policy}"
    if triggerer.name == DAG_TEST_USER and not triggerer.found:
        why = "`airflow dags test` runs on the deployment itself"
    elif triggerer.unavailable is not None:
        why = (
            f"the auth manager {triggerer.manager} cannot look users up in a task; a manual "
            f"run of user {triggerer.name!r} was triggered through the api-server, whose "
            f"replay guard checked at trigger time that this user may trigger {dag_id!r} "
            "(or with `airflow dags trigger` on the deployment itself)"
        )
    else:
        why = (
            f"Airflow's auth manager ({triggerer.manager}) lets user {triggerer.name!r} "
            f"trigger {dag_id!r}"
        )
    return Verdict(True, f"retention__replay may replay policy {policy!r}: {why}")


def _refusal(policy: str, triggerer: Triggerer) -> str | None:
    """Why ``triggerer`` may not replay ``policy``'s dead letters, or None when they may."""
    dag_id = f"{DAG_ID_PREFIX}{policy}"
    refused = f"retention__replay refused for policy {policy!r}: "
    how = (
        f"Trigger retention__replay as an Airflow user who may trigger {dag_id!r} (the UI, "
        "the REST API or the Retention view), or replay with `airflow dags test "
        "retention__replay` on the deployment."
    )
    if triggerer.name is None:
        return (
            f"{refused}no user triggered this run (the scheduler, an asset event or another "
            f"DAG's operator started it), so nobody's right to trigger the DAG {dag_id!r} can "
            f"be checked. {how}"
        )
    if triggerer.unavailable is not None:
        if triggerer.run_type == MANUAL_RUN:
            return None  # created through the api-server, whose guard checked the right
        return (
            f"{refused}the right of user {triggerer.name!r} to trigger the DAG {dag_id!r} "
            f"cannot be checked: {triggerer.unavailable}; and a {triggerer.run_type!r} run "
            "was not created through the api-server's trigger, whose replay guard checks it "
            f"at trigger time. {how}"
        )
    if triggerer.found:
        if triggerer.may_trigger:
            return None
        return (
            f"{refused}user {triggerer.name!r} may not trigger the DAG {dag_id!r} (Airflow's "
            f"auth manager ({triggerer.manager}) says no), and replaying the policy's dead "
            "letters needs that right. Ask an admin for it, or ask a user who has it to replay."
        )
    if triggerer.name == DAG_TEST_USER:
        return None  # `airflow dags test`: the deployment itself, see the module's docstring
    return (
        f"{refused}the run was triggered by {triggerer.name!r}, whom Airflow's auth manager "
        f"({triggerer.manager}) does not know (a user deleted since, or the operating-system "
        f"account of `airflow dags trigger`), so their right to trigger the DAG {dag_id!r} "
        f"cannot be checked. {how}"
    )


def may_trigger_dag(manager: Any, user: Any, dag_id: str) -> bool:
    """May ``user`` create a run of ``dag_id``? What Airflow's ``POST /dags/{dag_id}/dagRuns``
    requires, asked of ``manager`` (an auth manager)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )

    return bool(
        manager.is_authorized_dag(
            method="POST",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=dag_id),
            user=user,
        )
    )


def auth_manager() -> Any:
    """The configured auth manager: the api-server's own instance, or, in a task, a new one
    of the ``[core] auth_manager`` class (deciding rights needs no ``init()``)."""
    from airflow.api_fastapi.app import create_auth_manager

    return create_auth_manager()


def find_user(manager: Any, name: str) -> Any | None:
    """The auth manager's user called ``name``, or None when it knows no such user.

    ``$RETENTION_REPLAY_USER_LOOKUP`` (``module:function``, called with the auth
    manager and the name) serves auth managers whose users live elsewhere; Airflow's
    simple auth manager is looked up in its configuration. Others raise
    :class:`LookupUnavailable`: FAB keeps its users in the metadata database, which
    Airflow 3 closes to tasks.
    """
    configured = os.environ.get(USER_LOOKUP_ENV)
    if configured:
        return _imported(configured)(manager, name)
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.configuration import conf

    if not isinstance(manager, SimpleAuthManager):
        raise LookupUnavailable(
            f"the auth manager {type(manager).__name__} cannot look users up by name outside "
            f"a request; set {USER_LOOKUP_ENV} to 'module:function', a function that takes "
            "the auth manager and a user name and returns that user (or None)"
        )
    if conf.getboolean("core", "simple_auth_manager_all_admins"):
        return SimpleAuthManagerUser(username=name, role="ADMIN")  # everybody is, by configuration
    return next((user for user in manager.get_users() if user.username == name), None)


def _imported(spec: str) -> UserLookup:
    module, _, attribute = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError, ValueError) as missing:
        raise LookupMisconfigured(
            f"{USER_LOOKUP_ENV}={spec!r} does not name a function ('module:function'): {missing}"
        ) from missing
    return found  # type: ignore[no-any-return]


def judge_triggerer(name: str | None, policy: str, run_type: str | None) -> Triggerer:
    """Ask the auth manager about the user ``name`` and the DAG of ``policy``."""
    manager = auth_manager()
    facts = Triggerer(name=name, manager=type(manager).__name__, run_type=run_type)
    if name is None:
        return facts
    try:
        user = find_user(manager, name)
    except LookupUnavailable as unavailable:
        return replace(facts, unavailable=str(unavailable))
    if user is None:
        return facts
    allowed = may_trigger_dag(manager, user, f"{DAG_ID_PREFIX}{policy}")
    return replace(facts, found=True, may_trigger=allowed)


def require_replay_right(policy: str, triggering_user: str | None, run_type: Any) -> None:
    """Fail the task (no retry: a right does not come back by waiting) unless the user who
    triggered the run may trigger ``retention__<policy>``; log what allowed it otherwise."""
    from airflow.sdk.exceptions import AirflowFailException

    kind = None if run_type is None else str(getattr(run_type, "value", run_type))
    try:
        triggerer = judge_triggerer(triggering_user, policy, kind)
    except LookupMisconfigured as misconfigured:
        raise AirflowFailException(
            f"retention__replay refused for policy {policy!r}: {misconfigured}"
        ) from misconfigured
    verdict = replay_verdict(policy, triggerer)
    if not verdict.allowed:
        raise AirflowFailException(verdict.reason)
    log.info("%s", verdict.reason)


async def request_user(request: Any) -> Any | None:
    """The user of an api-server request, as Airflow's own routes resolve it (the
    ``Authorization: Bearer`` token first, else the login cookie, through the auth
    manager), or None: no login, or an expired or bad token (Airflow answers those)."""
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user
    from fastapi import HTTPException

    try:
        credentials = await bearer_scheme(request)
        return await get_user(request, None, credentials)
    except HTTPException:
        return None
