"""The DAG docs an operator reads in the UI show the settings the policy really runs with."""

from __future__ import annotations

import re

import pytest

from retention.airflow.dag_factory import build_dag
from retention.policy import load_policies
from retention.policy.model import Policy


def shipped(name: str) -> Policy:
    loaded = load_policies()
    return next(policy for policy in loaded.policies if policy.name == name)


def docs_table(policy: Policy) -> dict[str, str]:
    """The ``| field | value |`` rows of the rendered DAG docs."""
    dag = build_dag(policy, auto_register=False)
    rows = re.findall(r"^\| ([^|]+) \| (.+) \|$", dag.doc_md or "", flags=re.MULTILINE)
    return {field.strip(): value for field, value in rows if field.strip() != "field"}


def test_the_media_policy_docs_name_its_remote_pool_and_every_remote_setting() -> None:
    policy = shipped("media_assets")
    remote = policy.remote
    assert remote is not None
    assert policy.notify is not None
    table = docs_table(policy)

    assert table["pool"].startswith(f"`{remote.pool}` (remote.pool)")
    assert f"`{policy.pool}`" not in table["pool"], "a remote policy's `pool` is not used"
    assert f"`{remote.method} {remote.endpoint}`" in table["remote"]
    assert f"connection `{remote.http_conn_id}`" in table["remote"]
    assert f"version `{remote.version_column}`" in table["remote"]
    assert f"{remote.rate_per_second:g}/s, burst {remote.burst}" in table["rate limit"]
    assert f"scope `{remote.scope}`" in table["rate limit"]
    calls = table["calls"]
    assert f"claim batch {remote.claim_batch}" in calls
    assert f"max attempts {remote.max_attempts}" in calls
    assert f"lease {remote.lease:g} s" in calls
    assert f"request timeout {remote.request_timeout_seconds:g} s" in calls
    assert f"`{remote.idempotency_header}` header" in table["retries"]
    assert table["max_lag_hours"].startswith(f"{policy.max_lag_hours:g} ")
    assert f"pool `{policy.notify.pool}`" in table["notify"]
    assert f"max attempts {policy.notify.max_attempts}" in table["notify"]


def test_docs_follow_the_policy_not_the_shipped_defaults() -> None:
    policy = shipped("media_assets")
    assert policy.remote is not None
    changed = policy.model_copy(
        update={
            "remote": policy.remote.model_copy(
                update={
                    "pool": "partner_api",
                    "claim_batch": 7,
                    "lease_seconds": 95.0,
                    "request_timeout_seconds": 3.0,
                    "method": "POST",
                }
            ),
            "max_lag_hours": 5.0,
        }
    )
    table = docs_table(changed)
    assert table["pool"].startswith("`partner_api` (remote.pool)")
    assert "claim batch 7," in table["calls"]
    assert "lease 95 s" in table["calls"]
    assert "request timeout 3 s" in table["calls"]
    assert table["remote"].startswith("`POST ")
    assert table["max_lag_hours"].startswith("5 ")


@pytest.mark.parametrize("name", ["event_logs"])
def test_a_row_policy_shows_its_own_pool_and_no_remote_rows(name: str) -> None:
    policy = shipped(name)
    table = docs_table(policy)
    assert table["pool"] == f"`{policy.pool}` × {policy.pool_slots} slot(s) per window"
    assert not {"remote", "rate limit", "calls", "retries", "404"} & set(table)
