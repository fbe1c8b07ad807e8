"""The web layer's reads, shared by the JSON API (:mod:`retention.airflow.api`) and the
Retention view (:mod:`retention.ui.app`), so the two cannot answer the same question
differently.

- :func:`read_each_database`: group the policies by database, connect to each once,
  and report a database that did not answer instead of failing the page.
- :func:`find_operation`: one operation's evidence record, with one answer policy:

  ====  ==================================================================
  200   the record, when the key is an operation of a policy whose DAG the
        user may read
  404   ``no operation with key …``: the key is not 64 hex digits, nobody
        knows it, or it belongs to a policy whose DAG the user may not read
        (the same words: anything else would confirm the key and name the
        policy)
  503   ``… could not read [...]``: not found in the databases that answered,
        and a database of a policy the user may read did not answer (no
        connection, or its query failed). A database without the retention
        ledger yet did answer: the key is not there.
  ====  ==================================================================

  The lookup itself never answers 403: a refusal would confirm the key. (403 is for
  actions a user may not take, such as a replay; 401 is the login dependency's.)
- :func:`find_erasure`: one erasure by id, with the same answer policy (404 ``no erasure
  … of a policy you may read``: unknown, or of a policy whose DAG the user may not read;
  503 when not found where the databases answered and one of a readable policy did not).
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import psycopg

from retention.airflow.connections import postgres
from retention.db.connection import Connection
from retention.erasures.request import get_erasure
from retention.evidence.explain import UnknownOperation, explain
from retention.policy import Policy

OPERATION_KEY = re.compile(r"[0-9a-f]{64}")
# a database that answers "no such table or schema" has no retention ledger yet: it answered
NO_LEDGER = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)

log = logging.getLogger(__name__)

T = TypeVar("T")


class LookupRefused(Exception):
    """The lookup's answer when there is no record to give: an HTTP status and its words,
    which the JSON API sends as ``detail`` and the view shows on its message page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class PerDatabase(Generic[T]):
    """What :func:`read_each_database` read: each database's answer, and the databases
    that did not answer with why."""

    answers: dict[str, T] = field(default_factory=dict)  # conn id → what ``read`` returned
    unanswered: dict[str, str] = field(default_factory=dict)  # conn id → the error

    def problems(self) -> list[str]:
        """One line per database that did not answer, naming its connection."""
        return [f"connection {conn_id!r}: {why}" for conn_id, why in self.unanswered.items()]


def by_database(policies: Iterable[Policy]) -> dict[str, list[Policy]]:
    """The policies grouped by their Postgres connection id, in the order of the ids."""
    grouped: dict[str, list[Policy]] = defaultdict(list)
    for policy in policies:
        grouped[policy.postgres_conn_id].append(policy)
    return dict(sorted(grouped.items()))


def read_each_database(
    policies: Iterable[Policy],
    read: Callable[[Connection, list[Policy]], T],
    *,
    what: str,
) -> PerDatabase[T]:
    """``read(conn, policies of that database)`` once per database. A database that
    cannot be reached, whose connection id Airflow does not know, or whose ``read`` fails
    with a database error, is reported in ``unanswered`` (and logged with ``what`` was
    being read); the others still count."""
    # imported here: the view (ui/) imports this module, and only airflow/ may load Airflow
    from airflow.sdk.exceptions import AirflowNotFoundException

    found: PerDatabase[T] = PerDatabase()
    for conn_id, members in by_database(policies).items():
        try:
            with postgres(conn_id) as conn:
                found.answers[conn_id] = read(conn, members)
        except AirflowNotFoundException:
            log.warning("%s: no Airflow connection %s", what, conn_id)
            found.unanswered[conn_id] = "no Airflow connection with this id"
        except (psycopg.Error, OSError) as failed:
            log.warning("%s: connection %s did not answer: %s", what, conn_id, failed)
            found.unanswered[conn_id] = str(failed)
    return found


def find_operation(
    key: str, policies: list[Policy], may_read: Callable[[str], bool]
) -> dict[str, Any]:
    """The evidence record of operation ``key`` among the policies whose DAG ``may_read``
    (asked with a DAG id); raises :class:`LookupRefused` (404 or 503, see the module)."""
    unknown = LookupRefused(404, f"no operation with key {key[:80]!r}")
    if not OPERATION_KEY.fullmatch(key):
        raise unknown
    # only the databases of policies the user may read, and only their operations:
    # a key of any other policy is answered as one nobody knows
    readable = {p.name for p in policies if may_read(p.dag_id)}

    resources_of = {p.name: p.remote.resources for p in policies if p.remote}

    def record_in(conn: Connection, members: list[Policy]) -> dict[str, Any] | None:
        try:
            return explain(conn, key, resources_of, {p.name: p for p in members})
        except (UnknownOperation, *NO_LEDGER):
            return None

    found = read_each_database(
        [p for p in policies if p.name in readable and p.remote], record_in, what="evidence lookup"
    )
    for record in found.answers.values():
        if record is not None and record["selected"]["policy"] in readable:
            return record
    if found.unanswered:
        raise LookupRefused(
            503,
            f"no operation with key {key!r} in the databases that answered; "
            f"could not read {sorted(found.unanswered)}",
        )
    raise unknown


def find_erasure(
    erasure_id: int, policies: list[Policy], may_read: Callable[[str], bool]
) -> dict[str, Any]:
    """Erasure ``erasure_id`` of a policy whose DAG ``may_read`` (asked with a DAG id);
    raises :class:`LookupRefused` (404 or 503, the answer policy of :func:`find_operation`).
    Ids are per database: each database's row counts only if it is of one of its
    readable policies."""
    readable = [p for p in policies if may_read(p.dag_id)]

    def erasure_in(conn: Connection, members: list[Policy]) -> dict[str, Any] | None:
        try:
            row = get_erasure(conn, erasure_id)
        except NO_LEDGER:
            return None
        return row if row is not None and row["policy"] in {p.name for p in members} else None

    found = read_each_database(readable, erasure_in, what="erasure lookup")
    for row in found.answers.values():
        if row is not None:
            return row
    if found.unanswered:
        raise LookupRefused(
            503,
            f"no erasure {erasure_id} in the databases that answered; "
            f"could not read {sorted(found.unanswered)}",
        )
    raise LookupRefused(404, f"no erasure {erasure_id} of a policy you may read")
