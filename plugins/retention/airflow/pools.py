"""How many slots the window pool has when a run plans, so that a pool edited in the UI
between runs changes how many windows the next run plans.

A task in Airflow 3 has no metadata database, and the Task SDK's execution API has
no pool call, so ``plan_windows`` reads the pool as any client of the public REST
API does: a token from ``POST /auth/token``, then ``GET /api/v2/pools/{pool}``. The
api-server's address and a user who may read pools (a viewer will do) are the
connection ``retention_airflow_api``. When that fails, the slots that
``airflow_settings.yaml`` declared when the DAG was parsed stand in, and without
those the plan follows the rows alone. The run never fails for it: the slots only
size the plan, and the scheduler enforces the pool whatever the plan.

A remote pass reads the same pool's stats while it works (:func:`pool_watch`: the
slots and those its tasks occupy), through the same connection, for the verdict on
what bounds the drain (``retention.queue.bound``). Without the connection, or when a
read fails, the pass goes on and its verdict says the pool's share is unknown, and why.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from urllib.parse import quote

import requests

from retention.airflow.rest import (
    TIMEOUT_SECONDS,
    ApiUnreadable,
    answer,
    api_settings,
    get,
    token,
)
from retention.queue.bound import PoolReading, PoolWatch

# A pass's samples wait less: the first that fails ends the sampling, never the pass.
SAMPLE_TIMEOUT_SECONDS = (1.0, 2.0)
SETTINGS_FILE = "airflow_settings.yaml"


@dataclass(frozen=True)
class PoolSlots:
    """A pool's slots as the plan uses them, and where they came from."""

    pool: str
    slots: int | None  # None: nobody said
    unreadable: str | None = None  # why Airflow's pools were not read (None: they were)

    def __str__(self) -> str:
        if self.unreadable is None:
            return f"pool {self.pool}: {self.slots} slots (from Airflow's pools)"
        why = f"Airflow's pools were not readable: {self.unreadable}"
        if self.slots is None:
            return (
                f"pool {self.pool}: slots unknown ({why}; {SETTINGS_FILE} does not declare "
                "it): the rows alone size the plan"
            )
        return f"pool {self.pool}: {self.slots} slots (from {SETTINGS_FILE}: {why})"


def pool_slots_now(
    pool: str, declared: int | None, read: Callable[[str], int] | None = None
) -> PoolSlots:
    """The pool's slots from Airflow's pools (``read``), else the ``declared`` ones."""
    try:
        return PoolSlots(pool, (read or read_pool_slots)(pool))
    except Exception as error:  # only the plan's size depends on it: never fail the run
        reason = (
            str(error) if isinstance(error, ApiUnreadable) else f"{type(error).__name__}: {error}"
        )
        return PoolSlots(pool, declared, unreadable=reason)


def read_pool_slots(pool: str) -> int:
    """The pool's slots, through the REST API the connection ``retention_airflow_api`` names."""
    base, login, password = api_settings()
    return api_pool_slots(base, login, password, pool)


def api_pool_slots(
    base_url: str, login: str, password: str, pool: str, session: requests.Session | None = None
) -> int:
    """``slots`` of ``GET /api/v2/pools/{pool}``, with a token for ``login`` (-1: unlimited)."""
    path = f"/api/v2/pools/{quote(pool, safe='')}"
    with nullcontext(session) if session is not None else requests.Session() as http:
        access_token = token(http, base_url, login, password, TIMEOUT_SECONDS)
        slots = answer(get(http, base_url, access_token, path), f"GET {path}").get("slots")
    if type(slots) is not int:
        raise ApiUnreadable(f"GET {path} answered slots={slots!r}, not a whole number")
    if slots < 0:  # Airflow's -1: unlimited, which says nothing about how many windows
        raise ApiUnreadable(f"GET {path} answered slots={slots}: the pool is unlimited")
    return slots


class PoolStats:
    """Reads a pool's stats (``GET /api/v2/pools/{pool}``) for a pass: one token, then one
    GET per sample, on one session; a refused token is asked for again once."""

    def __init__(
        self, base_url: str, login: str, password: str, session: requests.Session | None = None
    ) -> None:
        self.base_url, self.login, self.password = base_url, login, password
        self.http = session or requests.Session()
        self.token: str | None = None

    def __call__(self, pool: str) -> PoolReading:
        try:
            return self._read(pool)
        except requests.RequestException as failed:
            raise ApiUnreadable(f"{type(failed).__name__}: {failed}") from None

    def _read(self, pool: str) -> PoolReading:
        path = f"/api/v2/pools/{quote(pool, safe='')}"
        for fresh in (False, True):
            if self.token is None or fresh:
                self.token = token(
                    self.http, self.base_url, self.login, self.password, SAMPLE_TIMEOUT_SECONDS
                )
            response = get(
                self.http, self.base_url, self.token, path, timeout=SAMPLE_TIMEOUT_SECONDS
            )
            if response.status_code != 401:
                break
        body = answer(response, f"GET {path}")
        slots, occupied = body.get("slots"), body.get("occupied_slots")
        if type(slots) is not int or type(occupied) is not int:
            raise ApiUnreadable(
                f"GET {path} answered slots={slots!r}, occupied_slots={occupied!r}: "
                "not whole numbers"
            )
        return PoolReading(slots=slots, occupied=occupied)


def pool_watch(pool: str, task_slots: int) -> PoolWatch:
    """A watch of ``pool`` for one remote pass, reading Airflow's pools through
    ``retention_airflow_api``; without that connection, a watch that says so."""
    try:
        base, login, password = api_settings()
    except ApiUnreadable as missing:
        return PoolWatch(pool, task_slots, None, unread=str(missing))
    return PoolWatch(pool, task_slots, PoolStats(base, login, password))
