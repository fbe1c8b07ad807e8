"""The Retention view's Airflow side: who is logged in, what they may do, and the
few facts only Airflow knows (paused DAGs, the pause Variable), plus starting a
``retention__replay`` run.

The pages never decide permissions themselves: every question goes to
Airflow's auth manager, the same one the rest of the UI asks. Airflow is
imported inside each method (the api-server has it; the package's other
layers must import without it).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Protocol

from fastapi import Request

from retention.airflow.rights import may_trigger_dag, request_user
from retention.rows.cutoff import FutureRun  # the view's, the lag alert's (dag_runs.py)
from retention.runs.status import ACTIVE_AIRFLOW_STATES

REPLAY_DAG_ID = "retention__replay"


class TriggerRefused(RuntimeError):
    """Airflow would not start the run: the DAG is not parsed yet, or its params refuse the conf."""


class Access(Protocol):
    """What the pages ask of Airflow (a stand-in serves tests without an api-server)."""

    async def user(self, request: Request) -> Any | None:
        """The logged-in user, or None (no login, or an expired or bad token)."""

    def login_url(self, next_url: str) -> str:
        """Where a browser without a login goes (coming back to ``next_url``)."""

    def user_name(self, user: Any) -> str: ...

    def may_read(self, user: Any, dag_id: str) -> bool:
        """May this user read this DAG (its runs, its evidence)?"""

    def may_read_every_dag(self, user: Any) -> bool:
        """May this user read all DAGs (what the auth manager answers without a DAG id)?"""

    def may_trigger(self, user: Any, dag_id: str) -> bool:
        """May this user create a run of this DAG?"""

    def may_edit(self, user: Any, dag_id: str) -> bool:
        """May this user edit this DAG (pause or unpause it)?"""

    def unpause(self, dag_id: str, user: Any) -> None:
        """Unpause ``dag_id`` as Airflow's ``PATCH /dags/{dag_id}`` does, on behalf of ``user``."""

    def run_states(self, dag_id: str, run_ids: list[str]) -> dict[str, str]:
        """Airflow's state (queued, running, success, failed) of each of these runs it knows."""

    def paused_dags(self, dag_ids: list[str]) -> dict[str, bool]:
        """Airflow's paused flag of each DAG it knows."""

    def pause_switch(self) -> str | None:
        """The Variable ``retention_pause`` now (None: not set)."""

    def future_runs(self, dag_ids: list[str], now: dt.datetime) -> list[FutureRun]:
        """Runs of these DAGs, queued or running, whose logical date is after ``now``."""

    def trigger(self, dag_id: str, conf: dict[str, Any], user: Any, note: str) -> str:
        """Start a run of ``dag_id`` with ``conf`` on behalf of ``user``; returns its run id.

        Raises :class:`TriggerRefused` with Airflow's reason when it will not.
        """


class AirflowAccess:
    """The real thing: Airflow's auth manager, metadata database and Variables."""

    async def user(self, request: Request) -> Any | None:
        return await request_user(request)

    def login_url(self, next_url: str) -> str:
        from airflow.api_fastapi.app import get_auth_manager

        return str(get_auth_manager().get_url_login(next_url=next_url))

    def user_name(self, user: Any) -> str:
        return str(user.get_name())

    def may_read(self, user: Any, dag_id: str) -> bool:
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

        return bool(
            get_auth_manager().is_authorized_dag(
                method="GET", details=DagDetails(id=dag_id), user=user
            )
        )

    def may_read_every_dag(self, user: Any) -> bool:
        """``is_authorized_dag`` without details: the right on DAGs as a whole (FAB: the
        "DAGs" resource, every DAG; the simple auth manager: any role)."""
        from airflow.api_fastapi.app import get_auth_manager

        return bool(get_auth_manager().is_authorized_dag(method="GET", user=user))

    def may_trigger(self, user: Any, dag_id: str) -> bool:
        """What the public API's ``POST /dags/{dag_id}/dagRuns`` requires (the replay task
        asks the same of the user who triggered it)."""
        from airflow.api_fastapi.app import get_auth_manager

        return may_trigger_dag(get_auth_manager(), user, dag_id)

    def may_edit(self, user: Any, dag_id: str) -> bool:
        """What the public API's ``PATCH /dags/{dag_id}`` (pausing, unpausing) requires."""
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

        return bool(
            get_auth_manager().is_authorized_dag(
                method="PUT", details=DagDetails(id=dag_id), user=user
            )
        )

    def unpause(self, dag_id: str, user: Any) -> None:
        """Set the DAG model's ``is_paused`` as ``PATCH /dags/{dag_id}`` does, and write the
        audit log row Airflow's UI would, so the unpause is as visible as one made there."""
        from airflow.models.dag import DagModel
        from airflow.models.log import Log
        from airflow.utils.session import create_session

        with create_session() as session:
            dag = session.get(DagModel, dag_id)
            if dag is None:
                raise TriggerRefused(
                    f"Airflow does not know the DAG {dag_id!r} yet (has the dag-processor "
                    "parsed it?)"
                )
            dag.is_paused = False
            session.add(
                Log(
                    event="patch_dag",
                    dag_id=dag_id,
                    owner=self.user_name(user),
                    extra='{"is_paused": false, "from": "Retention view"}',
                )
            )

    def run_states(self, dag_id: str, run_ids: list[str]) -> dict[str, str]:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.execute(
                select(DagRun.run_id, DagRun.state).where(
                    DagRun.dag_id == dag_id, DagRun.run_id.in_(run_ids)
                )
            ).all()
        return {run_id: str(getattr(state, "value", state)) for run_id, state in rows}

    def paused_dags(self, dag_ids: list[str]) -> dict[str, bool]:
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.execute(
                select(DagModel.dag_id, DagModel.is_paused).where(DagModel.dag_id.in_(dag_ids))
            ).all()
        return {dag_id: bool(paused) for dag_id, paused in rows}

    def future_runs(self, dag_ids: list[str], now: dt.datetime) -> list[FutureRun]:
        """Read from Airflow's metadata database, as ``paused_dags`` is (a task, which has no
        metadata database, asks the REST API: ``retention.airflow.dag_runs``)."""
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.execute(
                select(DagRun.dag_id, DagRun.run_id, DagRun.logical_date, DagRun.state)
                .where(
                    DagRun.dag_id.in_(dag_ids),
                    DagRun.state.in_(ACTIVE_AIRFLOW_STATES),
                    DagRun.logical_date > now,
                )
                .order_by(DagRun.dag_id, DagRun.logical_date)
            ).all()
        return [
            FutureRun(dag_id, run_id, logical_date, str(getattr(state, "value", state)))
            for dag_id, run_id, logical_date, state in rows
        ]

    def pause_switch(self) -> str | None:
        from airflow.models.variable import Variable

        from retention.db.gate import PAUSE_VARIABLE

        value = Variable.get(PAUSE_VARIABLE, default_var=None)
        return None if value is None else str(value)

    def trigger(self, dag_id: str, conf: dict[str, Any], user: Any, note: str) -> str:
        from airflow.api.common.trigger_dag import trigger_dag
        from airflow.exceptions import DagNotFound, DagRunAlreadyExists
        from airflow.utils.types import DagRunTriggeredByType

        now = dt.datetime.now(dt.UTC)
        try:
            run = trigger_dag(
                dag_id,
                triggered_by=DagRunTriggeredByType.UI,
                triggering_user_name=self.user_name(user),
                # one run per policy of a selection, started in the same second: the
                # policy in the id keeps them apart
                run_id=f"manual__{now.isoformat()}__{conf.get('policy', '')}",
                conf=conf,
                note=note,
            )
        except DagNotFound as missing:
            raise TriggerRefused(
                f"Airflow does not know the DAG {dag_id!r} yet (is dags/retention_replay.py "
                f"deployed, and has the dag-processor parsed it?): {missing}"
            ) from missing
        except (DagRunAlreadyExists, ValueError) as refused:  # ParamValidationError too
            raise TriggerRefused(f"Airflow refused a run of {dag_id!r}: {refused}") from refused
        if run is None:
            raise RuntimeError(f"Airflow did not create a run of {dag_id}")
        return str(run.run_id)
