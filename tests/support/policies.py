"""Build valid policies for tests, with overrides (no database, no Airflow)."""

from __future__ import annotations

from typing import Any

from retention.policy import Policy, parse_policy

TEST_CONN_ID = "retention_test"
HTTP_CONN_ID = "sandbox_api"
# Only the required fields of a remote section, so that every default applies.
REQUIRED_REMOTE: dict[str, Any] = {
    "http_conn_id": "api",
    "endpoint": "/v1/{object_id}",
    "object_id_column": "object_key",
    "rate_per_second": 5,
    "burst": 5,
    "pool": "api_pool",
}


def policy_fields(name: str, **overrides: Any) -> dict[str, Any]:
    """A valid policy mapping for table public.<name>, with overrides (None drops a field)."""
    fields: dict[str, Any] = {
        "schedule": "@daily",
        "start_date": "2026-01-01",
        "retain_days": 30,
        "postgres_conn_id": TEST_CONN_ID,
        "table": f"public.{name}",
        "key_column": "id",
        "timestamp_column": "created_at",
        "tenant_column": "tenant_id",
        "window_rows": 1000,
        "batch_rows": 100,
        "pool": "default_pool",
    }
    fields.update(overrides)
    return {k: v for k, v in fields.items() if v is not None}


def make_policy(name: str, **overrides: Any) -> Policy:
    policy, problems = parse_policy(name, policy_fields(name, **overrides))
    assert policy is not None, problems
    return policy


def remote_fields(name: str, **remote: Any) -> dict[str, Any]:
    """A remote section against the sandbox API, fast backoffs for tests."""
    spec: dict[str, Any] = {
        "http_conn_id": HTTP_CONN_ID,
        "endpoint": "/v1/assets/{object_id}",
        "object_id_column": "object_key",
        "version_column": "version",
        "rate_per_second": 500,
        "burst": 50,
        "limiter_scope": name,
        "pool": "default_pool",
        "max_attempts": 4,
        "request_timeout_seconds": 2,
        "backoff_base_seconds": 0.05,
        "backoff_max_seconds": 0.2,
    }
    spec.update(remote)
    return {k: v for k, v in spec.items() if v is not None}


def remote_policy(
    name: str,
    notify: dict[str, Any] | None = None,
    *,
    ignore_foreign_keys: list[dict[str, str]] | None = None,
    children: list[dict[str, Any]] | None = None,
    **remote: Any,
) -> Policy:
    fields: dict[str, Any] = {
        "window_rows": 10_000,
        "batch_rows": 500,
        "window_per_tenant": False,
        "remote": remote_fields(name, **remote),
    }
    if notify is not None:
        fields["notify"] = notify
    if ignore_foreign_keys is not None:
        fields["ignore_foreign_keys"] = ignore_foreign_keys
    if children is not None:
        fields["children"] = children
    return make_policy(name, **fields)


def nested_children(levels: int) -> list[dict[str, Any]]:
    """``levels`` child tables, each the only child of the one before."""
    child: list[dict[str, Any]] = []
    for level in range(levels, 0, -1):
        child = [{"table": f"level_{level}", "foreign_key": "parent_id", "children": child}]
    return child
