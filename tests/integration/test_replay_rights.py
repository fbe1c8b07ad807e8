"""Who may replay a policy's dead letters: the ``retention__replay`` task asks Airflow's auth
manager whether the user who triggered the run may trigger ``retention__<policy>``.

The auth manager is Airflow's real ``SimpleAuthManager`` (its users from
``[core] simple_auth_manager_users``), or a subclass of it that, as FAB's per-DAG
permissions can, refuses to let anyone trigger chosen DAGs
(``tests/support/auth_managers.py``). The task is the DAG file's own, run in
process under a context whose run names its triggering user, over the real
Postgres: a refused replay leaves every dead operation dead and writes no audit row.
The Retention view's ``AirflowAccess`` is asked the same questions at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from airflow.api_fastapi import app as airflow_app
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from airflow.models.dagbag import DagBag
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.execution_time.context import set_current_context
from airflow.utils.types import DagRunType

from retention.airflow.access import AirflowAccess
from retention.airflow.rights import USER_LOOKUP_ENV, LookupUnavailable, find_user
from retention.db.connection import Connection
from tests.support.auth_managers import UNTRIGGERABLE_ENV, NameBlindAuthManager, PerDagAuthManager
from tests.support.env import ROOT
from tests.support.ui_seed import SeededLedger, seeded_remote_policy

SIMPLE_USERS = "alice:user,vic:viewer"


@dataclass
class Replay:
    seeded: SeededLedger
    db: Connection
    dag: Any  # the DAG file's retention__replay

    def run(
        self, triggering_user: str | None, task_id: str = "replay", run_type: str = "manual"
    ) -> dict[str, Any]:
        """Run the task as a run of ``run_type`` triggered by ``triggering_user`` would."""
        context: Any = {
            "params": {
                "kind": "operations",
                "policy": self.seeded.policy.name,
                "operation_keys": self.seeded.dead_keys,
                "failure_class": None,
                "since": None,
                "event_ids": [],
                "reason": "rights test",
            },
            "run_id": "manual__rights",
            "dag_run": SimpleNamespace(
                triggering_user_name=triggering_user, run_type=DagRunType(run_type)
            ),
        }
        with set_current_context(context):
            return self.dag.task_dict[task_id].python_callable()

    def states(self) -> list[str]:
        return [
            row["state"]
            for row in self.db.execute(
                "SELECT state FROM retention.operations WHERE operation_key = ANY(%s)",
                (self.seeded.dead_keys,),
            )
        ]

    def audit_rows(self) -> int:
        return self.db.execute(
            "SELECT count(*) AS n FROM retention.replays WHERE policy = %s",
            (self.seeded.policy.name,),
        ).fetchone()["n"]


@pytest.fixture
def replay(
    db: Connection,
    test_dsn: str,
    unique_name: str,
    sandbox,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Replay:
    fields, seeded = seeded_remote_policy(db, test_dsn, unique_name, sandbox)
    policies = tmp_path / "policies.yaml"
    policies.write_text(yaml.safe_dump({"policies": {unique_name: fields}}))
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", SIMPLE_USERS)
    monkeypatch.delenv("AIRFLOW__CORE__AUTH_MANAGER", raising=False)
    monkeypatch.setattr(airflow_app._AuthManagerState, "instance", None)  # as a fresh process
    bag = DagBag(dag_folder=str(ROOT / "dags" / "retention_replay.py"))
    assert bag.import_errors == {}
    return Replay(seeded, db, bag.dags["retention__replay"])


def test_a_user_who_may_not_trigger_the_policy_cannot_replay_it(replay: Replay) -> None:
    """vic is a viewer: the simple auth manager lets a viewer trigger no DAG."""
    dag_id = replay.seeded.policy.dag_id
    with pytest.raises(AirflowFailException, match="user 'vic' may not trigger"):
        replay.run("vic", "migrate_schema")  # the first task refuses already
    with pytest.raises(AirflowFailException) as refused:
        replay.run("vic")
    message = str(refused.value)
    assert f"policy {replay.seeded.policy.name!r}" in message
    assert f"user 'vic' may not trigger the DAG {dag_id!r}" in message
    assert replay.states() == ["dead", "dead"], "nothing was replayed"
    assert replay.audit_rows() == 0


def test_the_right_asked_for_is_the_policys_dag_not_the_replay_dag(
    replay: Replay, monkeypatch: pytest.MonkeyPatch
) -> None:
    """alice may trigger retention__replay, but the auth manager refuses her the policy's DAG."""
    monkeypatch.setenv(
        "AIRFLOW__CORE__AUTH_MANAGER", f"{PerDagAuthManager.__module__}.PerDagAuthManager"
    )
    monkeypatch.setenv(UNTRIGGERABLE_ENV, replay.seeded.policy.dag_id)
    with pytest.raises(AirflowFailException, match="user 'alice' may not trigger the DAG"):
        replay.run("alice")
    assert replay.states() == ["dead", "dead"]
    monkeypatch.setenv(UNTRIGGERABLE_ENV, "retention__some_other_policy")
    assert sorted(replay.run("alice")["operation_keys"]) == sorted(replay.seeded.dead_keys)


def test_a_user_who_may_trigger_the_policy_replays_it(replay: Replay) -> None:
    result = replay.run("alice")
    assert sorted(result["operation_keys"]) == sorted(replay.seeded.dead_keys)
    assert replay.states() == ["pending", "pending"]
    assert replay.audit_rows() == 1


@pytest.mark.parametrize(
    ("triggering_user", "why"),
    [
        (None, "no user triggered this run"),
        ("mallory", "'mallory', whom Airflow's auth manager (SimpleAuthManager) does not know"),
    ],
    ids=["no-user", "unknown-user"],
)
def test_a_run_whose_user_cannot_be_judged_is_refused(
    replay: Replay, triggering_user: str | None, why: str
) -> None:
    with pytest.raises(AirflowFailException) as refused:
        replay.run(triggering_user)
    assert why in str(refused.value)
    assert replay.seeded.policy.dag_id in str(refused.value)
    assert replay.states() == ["dead", "dead"]


def test_airflow_dags_test_may_replay(replay: Replay) -> None:
    """``airflow dags test`` (and ``dag.test()``) name their runs' user ``dag_test``: whoever
    runs it has the deployment itself, not a login the auth manager could judge."""
    assert sorted(replay.run("dag_test")["operation_keys"]) == sorted(replay.seeded.dead_keys)


def test_in_all_admins_mode_every_name_is_an_admin(
    replay: Replay, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``simple_auth_manager_all_admins`` makes every API user an admin: the task agrees."""
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    assert sorted(replay.run("Anonymous")["operation_keys"]) == sorted(replay.seeded.dead_keys)


def test_a_configured_lookup_finds_users_for_other_auth_managers(
    replay: Replay, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(USER_LOOKUP_ENV, "tests.support.auth_managers:viewers_only")
    with pytest.raises(AirflowFailException, match="user 'alice' may not trigger"):
        replay.run("alice")
    monkeypatch.setenv(USER_LOOKUP_ENV, "tests.support.auth_managers:no_such_function")
    with pytest.raises(AirflowFailException, match="does not name a function"):
        replay.run("alice")
    assert replay.states() == ["dead", "dead"]


def test_an_auth_manager_without_a_lookup_refuses_by_name() -> None:
    with pytest.raises(LookupUnavailable, match=f"set {USER_LOOKUP_ENV}"):
        find_user(object(), "alice")


def test_without_a_lookup_a_manual_run_checked_by_the_guard_replays(
    replay: Replay, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """FAB, Astro, MWAA, Composer: the task cannot look the user up, but a manual run with a
    user was created through the api-server, whose replay guard checked the user's right."""
    monkeypatch.setenv(
        "AIRFLOW__CORE__AUTH_MANAGER", f"{NameBlindAuthManager.__module__}.NameBlindAuthManager"
    )
    with caplog.at_level("INFO", logger="retention.airflow.rights"):
        result = replay.run("alice")
    assert sorted(result["operation_keys"]) == sorted(replay.seeded.dead_keys)
    assert "replay guard checked at trigger time that this user may trigger" in caplog.text
    assert replay.audit_rows() == 1


@pytest.mark.parametrize(
    ("triggering_user", "run_type", "why"),
    [
        (None, "manual", "no user triggered this run"),
        ("alice", "operator_triggered", "'operator_triggered' run was not created through"),
        ("alice", "backfill", "'backfill' run was not created through"),
    ],
    ids=["no-user", "operator-triggered", "backfill"],
)
def test_without_a_lookup_runs_the_guard_did_not_see_are_refused(
    replay: Replay,
    monkeypatch: pytest.MonkeyPatch,
    triggering_user: str | None,
    run_type: str,
    why: str,
) -> None:
    monkeypatch.setenv(
        "AIRFLOW__CORE__AUTH_MANAGER", f"{NameBlindAuthManager.__module__}.NameBlindAuthManager"
    )
    with pytest.raises(AirflowFailException) as refused:
        replay.run(triggering_user, run_type=run_type)
    assert why in str(refused.value)
    assert replay.states() == ["dead", "dead"]
    assert replay.audit_rows() == 0


def test_the_view_asks_the_same_auth_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Retention view's questions (``AirflowAccess``) go to the api-server's auth manager
    and ask the same right of the policy's DAG as the replay task."""
    monkeypatch.setattr(airflow_app._AuthManagerState, "instance", None)
    monkeypatch.setenv(
        "AIRFLOW__CORE__AUTH_MANAGER", f"{PerDagAuthManager.__module__}.PerDagAuthManager"
    )
    monkeypatch.setenv(UNTRIGGERABLE_ENV, "retention__secret")
    airflow_app.create_auth_manager()  # as the api-server does when it starts
    access = AirflowAccess()
    alice = SimpleAuthManagerUser(username="alice", role="user")
    vic = SimpleAuthManagerUser(username="vic", role="viewer")
    nobody = SimpleAuthManagerUser(username="nobody", role=None)
    assert access.may_trigger(alice, "retention__media")
    assert not access.may_trigger(alice, "retention__secret")
    assert not access.may_trigger(vic, "retention__media")
    assert access.may_read_every_dag(vic)
    assert not access.may_read_every_dag(nobody)
