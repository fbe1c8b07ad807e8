"""The replay rule as a table: who may replay a policy's dead letters, given what Airflow's
auth manager said about the user who triggered the run and the run's type."""

from __future__ import annotations

import pytest

from retention.airflow.rights import DAG_TEST_USER, Triggerer, replay_verdict

MANAGER = "SimpleAuthManager"
BLIND = "FabAuthManager"  # an auth manager that cannot look a user up by name in a task


@pytest.mark.parametrize(
    ("triggerer", "refused_because"),
    [
        (Triggerer("alice", MANAGER, found=True, may_trigger=True, run_type="manual"), None),
        (
            Triggerer("vic", MANAGER, found=True, may_trigger=False, run_type="manual"),
            "user 'vic' may not trigger the DAG 'retention__media'",
        ),
        (Triggerer(None, MANAGER, run_type="manual"), "no user triggered this run"),
        (
            Triggerer("mallory", MANAGER, run_type="manual"),
            "'mallory', whom Airflow's auth manager",
        ),
        (Triggerer(DAG_TEST_USER, MANAGER, run_type="manual"), None),
        # a user of the auth manager called dag_test is judged like any other user
        (
            Triggerer(DAG_TEST_USER, MANAGER, found=True, may_trigger=False, run_type="manual"),
            "user 'dag_test' may not trigger",
        ),
        # an auth manager that cannot look names up: a manual run with a user came through
        # the api-server, whose replay guard checked the right at trigger time
        (Triggerer("alice", BLIND, unavailable="no lookup", run_type="manual"), None),
        (Triggerer(DAG_TEST_USER, BLIND, unavailable="no lookup", run_type="manual"), None),
        (
            Triggerer(None, BLIND, run_type="manual"),
            "no user triggered this run",
        ),
        (
            Triggerer("alice", BLIND, unavailable="no lookup", run_type="operator_triggered"),
            "the right of user 'alice' to trigger the DAG 'retention__media' cannot be checked",
        ),
        (
            Triggerer("alice", BLIND, unavailable="no lookup", run_type="backfill"),
            "a 'backfill' run was not created through the api-server's trigger",
        ),
    ],
    ids=[
        "may-trigger",
        "may-not-trigger",
        "no-user",
        "unknown-user",
        "airflow-dags-test",
        "a-user-named-dag_test",
        "no-lookup-manual-run-checked-by-the-guard",
        "no-lookup-airflow-dags-test",
        "no-lookup-no-user",
        "no-lookup-operator-triggered",
        "no-lookup-backfill",
    ],
)
def test_who_may_replay(triggerer: Triggerer, refused_because: str | None) -> None:
    verdict = replay_verdict("media", triggerer)
    if refused_because is None:
        assert verdict.allowed, verdict.reason
        assert verdict.reason.startswith("retention__replay may replay policy 'media': ")
        return
    assert not verdict.allowed
    assert verdict.reason.startswith("retention__replay refused for policy 'media': ")
    assert refused_because in verdict.reason
    assert "'retention__media'" in verdict.reason, "the message names the right that is missing"


def test_a_run_allowed_without_a_lookup_says_the_guard_checked_it() -> None:
    """What the task logs when it relies on the api-server's guard."""
    verdict = replay_verdict(
        "media", Triggerer("alice", BLIND, unavailable="no lookup", run_type="manual")
    )
    assert "replay guard checked at trigger time that this user may trigger" in verdict.reason
    assert "'retention__media'" in verdict.reason
