"""A stand-in for the Retention view's questions to Airflow, for in-process page tests.

It answers as Airflow's simple auth manager does for its roles (a viewer may
read every DAG and trigger none; a user, op or admin may trigger and edit), except for
the DAGs a test makes unreadable or untriggerable (as FAB's per-DAG permissions
can), knows users
by the token in the ``_token`` cookie, and records the runs it is asked to
start instead of creating them. The real answers are tested on a real
api-server in ``tests/e2e/test_retention_ui.py``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from retention.airflow.access import FutureRun, TriggerRefused

TRIGGERING_ROLES = {"user", "op", "admin"}


@dataclass(frozen=True)
class StandInUser:
    name: str
    role: str


@dataclass
class StandInAccess:
    """Users by token; records triggered runs as (dag_id, conf, user name, note)."""

    users: dict[str, StandInUser]
    unreadable_dags: set[str] = field(default_factory=set)
    untriggerable_dags: set[str] = field(default_factory=set)
    uneditable_dags: set[str] = field(default_factory=set)
    paused: dict[str, bool] = field(default_factory=dict)
    switch: str | None = None
    triggered: list[tuple[str, dict[str, Any], str, str]] = field(default_factory=list)
    refuse: str | None = None  # the reason Airflow would give for refusing every run
    unpaused: list[tuple[str, str]] = field(default_factory=list)  # (dag_id, user name)
    states: dict[tuple[str, str], str] = field(default_factory=dict)  # (dag_id, run_id): state
    runs: list[FutureRun] = field(default_factory=list)  # DAG runs Airflow has, any date

    async def user(self, request: Request) -> StandInUser | None:
        return self.users.get(request.cookies.get("_token", ""))

    def login_url(self, next_url: str) -> str:
        return f"/auth/login?next={next_url}"

    def user_name(self, user: Any) -> str:
        return str(user.name)

    def may_read(self, user: Any, dag_id: str) -> bool:
        return dag_id not in self.unreadable_dags

    def may_read_every_dag(self, user: Any) -> bool:
        return not self.unreadable_dags

    def may_trigger(self, user: Any, dag_id: str) -> bool:
        return user.role in TRIGGERING_ROLES and dag_id not in self.untriggerable_dags

    def may_edit(self, user: Any, dag_id: str) -> bool:
        return user.role in TRIGGERING_ROLES and dag_id not in self.uneditable_dags

    def unpause(self, dag_id: str, user: Any) -> None:
        self.paused[dag_id] = False
        self.unpaused.append((dag_id, user.name))

    def run_states(self, dag_id: str, run_ids: list[str]) -> dict[str, str]:
        return {r: self.states[(dag_id, r)] for r in run_ids if (dag_id, r) in self.states}

    def paused_dags(self, dag_ids: list[str]) -> dict[str, bool]:
        return {d: self.paused[d] for d in dag_ids if d in self.paused}

    def pause_switch(self) -> str | None:
        return self.switch

    def future_runs(self, dag_ids: list[str], now: dt.datetime) -> list[FutureRun]:
        return [r for r in self.runs if r.dag_id in dag_ids and r.logical_date > now]

    def trigger(self, dag_id: str, conf: dict[str, Any], user: Any, note: str) -> str:
        if self.refuse is not None:
            raise TriggerRefused(self.refuse)
        self.triggered.append((dag_id, conf, user.name, note))
        return f"manual__{len(self.triggered)}"
