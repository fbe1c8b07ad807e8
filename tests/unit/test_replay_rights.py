"""The replay rule as a table: who may replay a policy's dead letters, given what Airflow's
auth manager said about the user who triggered the run."""

from __future__ import annotations

import pytest

from retention.airflow.rights import DAG_TEST_USER, Triggerer, replay_refusal

MANAGER = "SimpleAuthManager"


@pytest.mark.parametrize(
    ("triggerer", "refused_because"),
    [
        (Triggerer("alice", MANAGER, found=True, may_trigger=True), None),
        (
            Triggerer("vic", MANAGER, found=True, may_trigger=False),
            "user 'vic' may not trigger the DAG 'retention__media'",
        ),
        (Triggerer(None, MANAGER), "no user triggered this run"),
        (Triggerer("mallory", MANAGER), "'mallory', whom Airflow's auth manager"),
        (Triggerer(DAG_TEST_USER, MANAGER), None),
        # a user of the auth manager called dag_test is judged like any other user
        (
            Triggerer(DAG_TEST_USER, MANAGER, found=True, may_trigger=False),
            "user 'dag_test' may not trigger",
        ),
        # an auth manager that cannot look names up: nobody can be judged, dag_test neither
        (
            Triggerer(DAG_TEST_USER, "FabAuthManager", unavailable="no lookup"),
            "the right of user 'dag_test' to trigger the DAG 'retention__media' cannot be checked",
        ),
    ],
    ids=[
        "may-trigger",
        "may-not-trigger",
        "no-user",
        "unknown-user",
        "airflow-dags-test",
        "a-user-named-dag_test",
        "no-lookup",
    ],
)
def test_who_may_replay(triggerer: Triggerer, refused_because: str | None) -> None:
    refusal = replay_refusal("media", triggerer)
    if refused_because is None:
        assert refusal is None
        return
    assert refusal is not None
    assert refusal.startswith("retention__replay refused for policy 'media': ")
    assert refused_because in refusal
    assert "'retention__media'" in refusal, "the message names the right that is missing"
