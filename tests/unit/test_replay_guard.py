"""The api-server's replay guard as a table: which requests creating a ``retention__replay``
run it refuses (403), given the body, the replayable policies and the user's rights."""

from __future__ import annotations

import json

import pytest

from retention.airflow.replay_guard import REPLAY_RUNS_PATH, _route, guard_refusal

POLICIES = ["media", "secret"]  # with a remote section, in file order: media is the default


def body(payload: object) -> bytes:
    return json.dumps(payload).encode()


@pytest.mark.parametrize(
    ("request_body", "triggerable", "refused_because"),
    [
        (body({"conf": {"policy": "media"}}), {"retention__media"}, None),
        (
            body({"conf": {"policy": "secret"}}),
            {"retention__media"},
            "refused for policy 'secret': you may not trigger the DAG 'retention__secret'",
        ),
        # no policy in conf: refused, whatever the user may trigger (the guard does not
        # guess the default param the dag-processor parsed)
        (body({"conf": {}}), {"retention__media"}, "conf must name the 'policy' to replay"),
        (body({}), {"retention__media", "retention__secret"}, "conf must name the 'policy'"),
        (body({"conf": None}), {"retention__media"}, "conf must name the 'policy'"),
        # unknown or mistyped policies are refused, as the replay task refuses them
        (
            body({"conf": {"policy": "nope"}}),
            {"retention__nope"},
            "conf 'policy' 'nope' is not a policy with a remote section",
        ),
        (body({"conf": {"policy": ["media"]}}), {"retention__media"}, "is not a policy"),
        # bodies Airflow itself refuses (422) are left to Airflow
        (b"not json", set(), None),
        (body(["conf"]), set(), None),
        (body({"conf": "policy=secret"}), set(), None),
        (b"\xff\xfe\x00", set(), None),
    ],
    ids=[
        "may-trigger",
        "may-not-trigger",
        "no-policy",
        "no-conf",
        "null-conf",
        "unknown-policy",
        "policy-not-a-string",
        "not-json",
        "not-an-object",
        "conf-not-an-object",
        "not-utf8",
    ],
)
def test_which_replay_triggers_are_refused(
    request_body: bytes, triggerable: set[str], refused_because: str | None
) -> None:
    refusal = guard_refusal(request_body, POLICIES, triggerable.__contains__)
    if refused_because is None:
        assert refusal is None
        return
    assert refusal is not None
    assert refusal.startswith("retention__replay refused")
    assert refused_because in refusal


def test_no_replayable_policy_refuses_every_trigger() -> None:
    refusal = guard_refusal(body({"conf": {"policy": "media"}}), [], lambda dag_id: True)
    assert refusal is not None
    assert "conf 'policy' 'media' is not a policy with a remote section" in refusal


@pytest.mark.parametrize(
    ("path", "root_path", "guarded"),
    [
        (REPLAY_RUNS_PATH, "", True),
        (f"{REPLAY_RUNS_PATH}/", "", True),
        (f"/airflow{REPLAY_RUNS_PATH}", "/airflow", True),
        ("/api/v2/dags/retention__media/dagRuns", "", False),
        (f"{REPLAY_RUNS_PATH}/list", "", False),
        (f"{REPLAY_RUNS_PATH}/manual__1/clear", "", False),
    ],
)
def test_the_guarded_route(path: str, root_path: str, guarded: bool) -> None:
    assert (_route({"path": path, "root_path": root_path}) == REPLAY_RUNS_PATH) is guarded
