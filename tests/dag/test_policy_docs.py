"""The DAG docs an operator reads in the UI show the settings the policy really runs with.

The whole text of the docs of a few sample policies is kept in
``tests/golden/policy_docs/<sample>.md``; a change to the docs shows there as a diff
to review. After changing the docs on purpose, rewrite the files and commit them::

    RETENTION_UPDATE_GOLDEN=1 pytest tests/dag/test_policy_docs.py

The named tests below keep the rules a golden file cannot: that the docs follow
each setting of the policy, and which pool a policy's rows name.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from typing import Any

import pytest

from retention.airflow.dag_factory import build_dag
from retention.paths import DEFAULT_POLICIES_PATH
from retention.policy import load_policies
from retention.policy.model import DerivativeSpec, Policy
from tests.support.env import ROOT
from tests.support.policies import REQUIRED_REMOTE, make_policy

GOLDEN = ROOT / "tests" / "golden" / "policy_docs"
UPDATE_GOLDEN = "RETENTION_UPDATE_GOLDEN"
REGENERATE = f"{UPDATE_GOLDEN}=1 pytest tests/dag/test_policy_docs.py"


def shipped(name: str) -> Policy:
    loaded = load_policies(DEFAULT_POLICIES_PATH)
    return next(policy for policy in loaded.policies if policy.name == name)


def changed_remote(policy: Policy, **remote: Any) -> Policy:
    """``policy`` with some of its ``remote:`` settings changed."""
    assert policy.remote is not None
    return policy.model_copy(update={"remote": policy.remote.model_copy(update=remote)})


def media_assets_changed() -> Policy:
    """The shipped media policy with settings other than the shipped ones."""
    policy = changed_remote(
        shipped("media_assets"),
        pool="partner_api",
        claim_batch=7,
        lease_seconds=95.0,
        request_timeout_seconds=3.0,
        method="POST",
    )
    return policy.model_copy(update={"max_lag_hours": 5.0})


def rows_without_tenant() -> Policy:
    """A row policy with fixed-size windows, no tenant column, alerts and a lag limit."""
    return make_policy(
        "rows_without_tenant",
        tenant_column=None,
        window_rows=2000,
        max_lag_hours=12,
        alerts={"on_dirty": "ops_alerts", "on_deadline": "ops_pager", "deadline_minutes": 90},
    )


def remote_404_rejected() -> Policy:
    """A remote policy on every default but its required fields, whose 404s are rejections."""
    return make_policy(
        "remote_404_rejected",
        window_per_tenant=False,
        remote={**REQUIRED_REMOTE, "not_found_is_deleted": False},
    )


# sample name -> (policy, the loader's warnings about it)
SAMPLES: dict[str, Callable[[], tuple[Policy, list[str]]]] = {
    "event_logs": lambda: (shipped("event_logs"), []),
    "media_assets": lambda: (shipped("media_assets"), []),
    "media_assets_changed": lambda: (media_assets_changed(), []),
    "rows_without_tenant": lambda: (rows_without_tenant(), ["a sample warning of the loader"]),
    "remote_404_rejected": lambda: (remote_404_rejected(), []),
}


def dag_docs(policy: Policy, warnings: list[str] | None = None) -> str:
    """The docs the policy's DAG carries (as the UI shows them)."""
    return build_dag(policy, warnings, auto_register=False).doc_md or ""


def docs_table(policy: Policy) -> dict[str, str]:
    """The ``| field | value |`` rows of the rendered DAG docs."""
    rows = re.findall(r"^\| ([^|]+) \| (.+) \|$", dag_docs(policy), flags=re.MULTILINE)
    return {field.strip(): value for field, value in rows if field.strip() != "field"}


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_the_docs_of_each_sample_policy_are_the_reviewed_ones(sample: str) -> None:
    policy, warnings = SAMPLES[sample]()
    rendered = dag_docs(policy, warnings)
    golden = GOLDEN / f"{sample}.md"
    if os.environ.get(UPDATE_GOLDEN) == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered)
        pytest.skip(f"rewrote {golden.relative_to(ROOT)}: review its diff and commit it")
    assert golden.is_file(), f"no {golden.relative_to(ROOT)}; write it with: {REGENERATE}"
    expected = golden.read_text()
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            rendered.splitlines(keepends=True),
            f"{golden.relative_to(ROOT)} (reviewed)",
            "rendered now",
        )
    )
    assert rendered == expected, (
        f"the DAG docs of sample {sample!r} changed:\n{diff}\n"
        f"If the change is meant, rewrite the golden files with: {REGENERATE}"
    )


def test_every_golden_file_belongs_to_a_sample() -> None:
    files = {path.stem for path in GOLDEN.glob("*.md")}
    assert files <= set(SAMPLES), f"delete the golden files of no sample: {files - set(SAMPLES)}"


# Each remote setting, with a value unlike the shipped one: the docs show every one.
REMOTE_SETTINGS: dict[str, Any] = {
    "pool": "partner_api",
    "method": "POST",
    "endpoint": "/v2/objects/{object_id}",
    "http_conn_id": "partner_conn",
    "object_id_column": "blob_key",
    "version_column": "etag",
    "rate_per_second": 7.5,
    "max_rate_per_second": 40.0,
    "burst": 3,
    "limiter_scope": "partner_scope",
    "recovery_seconds": 17.0,
    "claim_batch": 7,
    "max_attempts": 3,
    "lease_seconds": 95.0,
    "request_timeout_seconds": 3.0,
    "task_budget_seconds": 77.0,
    "backoff_base_seconds": 0.5,
    "backoff_max_seconds": 33.0,
    "idempotency_header": "X-Request-Key",
    "auth_failure_limit": 2,
    "not_found_is_deleted": False,
    "not_found_breaker": 5,
    "derivatives": (
        DerivativeSpec(name="posters", endpoint="/v1/posters/{object_id}", method="POST"),
    ),
    "held_statuses": [423],
}
# A setting read only with another is changed from a policy that sets both.
REMOTE_BASELINES: dict[str, dict[str, Any]] = {
    "max_rate_per_second": {"rate_per_second": "auto", "max_rate_per_second": 60.0},
}
# The notify settings the docs show, and those they leave to docs/remote.md.
NOTIFY_SETTINGS: dict[str, Any] = {
    "http_conn_id": "partner_events",
    "endpoint": "/v2/hooks",
    "pool": "events_pool",
    "max_attempts": 2,
    "timeout_seconds": 4.0,
    "lease_seconds": 45.0,
}
NOTIFY_NOT_SHOWN = {"backoff_base_seconds", "backoff_max_seconds", "claim_batch"}
NOTIFY_NOT_SHOWN |= {"task_budget_seconds"}
# Policy settings on the media policy (a remote one) and on the event log (a row one).
POLICY_SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("media_assets", {"max_lag_hours": 5.0}),
    ("media_assets", {"pool_slots": 3}),
    ("media_assets", {"retain_days": 21}),
    ("media_assets", {"postgres_conn_id": "other_target"}),
    ("media_assets", {"key_column": "asset_id"}),
    ("media_assets", {"timestamp_column": "uploaded_at"}),
    ("media_assets", {"tenant_column": "account_id"}),
    ("media_assets", {"hold_column": "legal_hold"}),
    ("media_assets", {"window_rows": 1234}),
    ("media_assets", {"batch_rows": 250}),
    ("media_assets", {"target_batch_ms": 750.0}),
    ("media_assets", {"min_batch_rows": 20}),
    ("media_assets", {"max_batch_rows": 20_000}),
    ("media_assets", {"owner": "storage-team"}),
    ("event_logs", {"pool": "other_pool"}),
    ("event_logs", {"pool_slots": 2}),
    ("event_logs", {"target_window_seconds": 45.0}),
]


def test_every_remote_setting_has_a_changed_value_to_check() -> None:
    """A new ``remote:`` field must show in the DAG docs (and be added here)."""
    assert policy_model_fields("remote") == set(REMOTE_SETTINGS)
    assert policy_model_fields("notify") == set(NOTIFY_SETTINGS) | NOTIFY_NOT_SHOWN


def policy_model_fields(section: str) -> set[str]:
    policy = shipped("media_assets")
    spec = getattr(policy, section)
    assert spec is not None
    return set(type(spec).model_fields)


@pytest.mark.parametrize("setting", sorted(REMOTE_SETTINGS))
def test_the_docs_follow_each_remote_setting_not_the_shipped_default(setting: str) -> None:
    policy = changed_remote(shipped("media_assets"), **REMOTE_BASELINES.get(setting, {}))
    changed = changed_remote(policy, **{setting: REMOTE_SETTINGS[setting]})
    assert docs_table(changed) != docs_table(policy), f"remote.{setting} changed, the docs did not"


@pytest.mark.parametrize("setting", sorted(NOTIFY_SETTINGS))
def test_the_docs_follow_each_notify_setting(setting: str) -> None:
    policy = shipped("media_assets")
    assert policy.notify is not None
    notify = policy.notify.model_copy(update={setting: NOTIFY_SETTINGS[setting]})
    changed = policy.model_copy(update={"notify": notify})
    assert docs_table(changed) != docs_table(policy), f"notify.{setting} changed, the docs did not"


@pytest.mark.parametrize(
    ("name", "update"), POLICY_SETTINGS, ids=[f"{n}-{next(iter(u))}" for n, u in POLICY_SETTINGS]
)
def test_the_docs_follow_each_policy_setting(name: str, update: dict[str, Any]) -> None:
    policy = shipped(name)
    assert docs_table(policy.model_copy(update=update)) != docs_table(policy), update


def test_an_auto_rate_says_where_its_rate_comes_from_and_its_ceiling() -> None:
    auto = changed_remote(shipped("media_assets"), rate_per_second="auto", max_rate_per_second=40.0)
    assert docs_table(auto)["rate limit"].startswith(
        "auto: from the API's rate-limit headers, at most 40/s, burst "
    )


def test_a_remote_policys_pool_row_names_remote_pool_not_the_policys_pool() -> None:
    """A remote policy's windows run in ``remote.pool``; its ``pool`` field is not used."""
    policy = changed_remote(shipped("media_assets"), pool="partner_api")
    assert policy.remote is not None
    pool = docs_table(policy)["pool"]
    assert pool.startswith("`partner_api` (remote.pool)")
    assert f"`{policy.pool}`" not in pool, "a remote policy's `pool` is not used"


@pytest.mark.parametrize("name", ["event_logs"])
def test_a_row_policy_shows_its_own_pool_and_no_remote_rows(name: str) -> None:
    policy = shipped(name)
    table = docs_table(policy)
    assert table["pool"].startswith(f"`{policy.pool}` ")
    assert not {"remote", "rate limit", "calls", "retries", "404"} & set(table)


def test_the_coupled_tables_row_says_when_each_kind_deletes_children_and_names_cascades() -> None:
    """A row policy's children go in each batch's transaction; a remote policy's in the
    finish transaction, once the API confirmed every resource. Unlisted cascades cannot be
    named at parse time: the row says where each run names them."""
    children = [{"table": "public.renditions", "foreign_key": "asset_id"}]
    rows = docs_table(make_policy("coupled_rows", children=children))["coupled tables"]
    remote = docs_table(make_policy("coupled_remote", children=children, remote=REQUIRED_REMOTE))[
        "coupled tables"
    ]
    assert "in each batch's transaction" in rows
    assert "batch's transaction" not in remote
    assert "in the finish transaction" in remote
    assert "once the API confirmed every remote resource" in remote
    for row in (rows, remote):
        assert "unlisted `ON DELETE CASCADE` child" in row
        assert "`plan_notes` and its plan log" in row
