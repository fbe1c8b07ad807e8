"""Who may replay a policy's dead letters, asked of Airflow's auth manager.

A ``retention__replay`` run acts on the policy named in its conf, so the right
to trigger ``retention__replay`` alone would let anyone replay any policy. A
replay therefore also needs the right the policy's own DAG guards: to trigger
``retention__<policy>`` (create a run of it, what ``POST /dags/{dag_id}/dagRuns``
requires). The Retention view asks it of the logged-in user; the replay task
asks it of the user who triggered the run, whom it knows only by name
(``dag_run.triggering_user_name``) and looks up in the auth manager.

The rule for runs whose user cannot be judged (:func:`replay_refusal`) fails
closed: no user, a user the auth manager does not know, or an auth manager
that cannot look users up by name is a refusal. The one exception is
``airflow dags test`` (``dag.test()``), which names its runs' user ``dag_test``:
whoever runs it has the deployment's metadata database and DAG files, more
than any auth manager right, and tests and operators use it.

Airflow is imported inside the functions (the api-server and the workers
have it; the pure rule is tested without an auth manager).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from retention.policy.model import DAG_ID_PREFIX

DAG_TEST_USER = "dag_test"  # the triggering user Airflow's dag.test() gives every run it makes
USER_LOOKUP_ENV = "RETENTION_REPLAY_USER_LOOKUP"  # "module:function" for other auth managers

UserLookup = Callable[[Any, str], Any | None]


class LookupUnavailable(LookupError):
    """The auth manager cannot name a user outside a request, and no lookup is configured."""


@dataclass(frozen=True)
class Triggerer:
    """What the auth manager said about the user who triggered a replay run."""

    name: str | None  # dag_run.triggering_user_name
    manager: str  # the auth manager's class name, for messages
    found: bool = False  # the auth manager knows a user by this name
    may_trigger: bool = False  # ... and lets that user trigger the policy's DAG
    unavailable: str | None = None  # why the name could not be looked up at all


def replay_refusal(policy: str, triggerer: Triggerer) -> str | None:
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
        return (
            f"{refused}the right of user {triggerer.name!r} to trigger the DAG {dag_id!r} "
            f"cannot be checked: {triggerer.unavailable}. {how}"
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
        raise LookupUnavailable(
            f"{USER_LOOKUP_ENV}={spec!r} does not name a function ('module:function'): {missing}"
        ) from missing
    return found  # type: ignore[no-any-return]


def judge_triggerer(name: str | None, policy: str) -> Triggerer:
    """Ask the auth manager about the user ``name`` and the DAG of ``policy``."""
    manager = auth_manager()
    facts = Triggerer(name=name, manager=type(manager).__name__)
    if name is None:
        return facts
    try:
        user = find_user(manager, name)
    except LookupUnavailable as unavailable:
        return Triggerer(name=name, manager=facts.manager, unavailable=str(unavailable))
    if user is None:
        return facts
    allowed = may_trigger_dag(manager, user, f"{DAG_ID_PREFIX}{policy}")
    return Triggerer(name=name, manager=facts.manager, found=True, may_trigger=allowed)


def require_replay_right(policy: str, triggering_user: str | None) -> None:
    """Fail the task (no retry: a right does not come back by waiting) unless the user who
    triggered the run may trigger ``retention__<policy>``."""
    from airflow.sdk.exceptions import AirflowFailException

    refusal = replay_refusal(policy, judge_triggerer(triggering_user, policy))
    if refusal is not None:
        raise AirflowFailException(refusal)
