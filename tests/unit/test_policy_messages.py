"""The exact words a user sees for each kind of bad policy (pure, no database).

Each message names the policy and the field (``policy 'm', field 'x': …``) and
says what is wrong with the value given; these tests pin the wording, so that
a change to it is a deliberate one.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from retention.policy import load_policies, parse_policy
from retention.policy.loader import duplicate_keys, pool_warnings
from tests.support.policies import REQUIRED_REMOTE as REMOTE
from tests.support.policies import policy_fields

KNOWN = (
    "schedule, start_date, retain_days, postgres_conn_id, table, key_column, timestamp_column, "
    "timestamp_timezone, "
    "window_rows, target_window_seconds, batch_rows, target_batch_ms, min_batch_rows, "
    "max_batch_rows, pool, pool_slots, tenant_column, hold_column, partitions, "
    "window_per_tenant, owner, tags, "
    "description, lock_timeout_ms, statement_timeout_ms, plan_statement_timeout_ms, revision, "
    "audit_days, max_lag_hours, analyze_after, children, ignore_foreign_keys, remote, notify, "
    "health, alerts"
)
IDENTIFIER = "is not a plain SQL identifier (letters, digits, underscores; at most 63 characters)"


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"colour": 1}, "colour", f"unknown field; known fields are {KNOWN}"),
        ({"table": None}, "table", "required field is missing"),
        ({"retain_days": "30"}, "retain_days", "must be a whole number, got '30'"),
        ({"retain_days": True}, "retain_days", "must be a whole number, got True"),
        ({"retain_days": 0}, "retain_days", "must be greater than 0, got 0"),
        ({"retain_days": 36_501}, "retain_days", "must be at most 36500, got 36501"),
        ({"max_lag_hours": float("inf")}, "max_lag_hours", "must be a finite number, got inf"),
        ({"max_lag_hours": "2"}, "max_lag_hours", "must be a number, got '2'"),
        ({"window_per_tenant": "yes"}, "window_per_tenant", "must be true or false, got 'yes'"),
        ({"owner": 5}, "owner", "must be a string, got 5"),
        ({"pool": ""}, "pool", "must be a non-empty string"),
        ({"pool": "  "}, "pool", "must be a non-empty string"),
        ({"tags": ["x" * 101]}, "tags", "item 0: must be at most 100 characters"),
        ({"tags": ["ok", 5]}, "tags", "item 1: must be a string, got 5"),
        ({"tags": [str(i) for i in range(51)]}, "tags", "must be at most 50 items"),
        ({"tags": "a"}, "tags", "must be a list"),
        ({"description": "x" * 10_001}, "description", "must be at most 10000 characters"),
        ({"key_column": "a-b"}, "key_column", f"'a-b' {IDENTIFIER}"),
        ({"key_column": "id\n"}, "key_column", f"'id\\n' {IDENTIFIER}"),
        (
            {"table": "a.b.c"},
            "table",
            "'a.b.c' is not 'schema.table' made of plain SQL identifiers",
        ),
        ({"start_date": 5}, "start_date", "must be an ISO date such as 2026-01-01"),
        ({"start_date": "soon"}, "start_date", "'soon' is not an ISO date such as 2026-01-01"),
        (
            {"schedule": "@fortnightly"},
            "schedule",
            "unknown preset '@fortnightly'; use one of ['@annually', '@daily', '@hourly', "
            "'@monthly', '@once', '@quarterly', '@weekly', '@yearly']",
        ),
        ({"schedule": 5}, "schedule", "must be a string, got 5"),
        ({"remote": "yes"}, "remote", "must be a mapping of fields"),
        (
            {"remote": {**REMOTE, "method": "GET"}},
            "remote.method",
            "must be one of 'DELETE', 'POST', 'PUT' or 'PATCH', got 'GET'",
        ),
        (
            {"remote": {**REMOTE, "rate_per_second": "5"}},
            "remote.rate_per_second",
            "must be a number or 'auto', got '5'",
        ),
        (
            {"remote": {**REMOTE, "rate_per_second": "auto"}},
            "remote.max_rate_per_second",
            "rate_per_second: auto needs max_rate_per_second, the most calls per second the "
            "API's headers may set (for example the rate its documentation promises)",
        ),
        (
            {"remote": {**REMOTE, "rate_per_second": 5, "max_rate_per_second": 50}},
            "remote.max_rate_per_second",
            "max_rate_per_second is read only with rate_per_second: auto; this policy's rate "
            "is 5/s: remove max_rate_per_second, or set rate_per_second: auto",
        ),
        (
            {"remote": {**REMOTE, "rate_per_second": "auto", "max_rate_per_second": 0}},
            "remote.max_rate_per_second",
            "must be greater than 0.0, got 0",
        ),
        (
            {"remote": {**REMOTE, "endpoint": "v1/{object_id}"}},
            "remote.endpoint",
            "must be a path starting with '/'",
        ),
        (
            {"remote": {**REMOTE, "endpoint": "/v1/{object_id!r}"}},
            "remote.endpoint",
            "placeholders take no format spec or conversion",
        ),
        (
            {"remote": {**REMOTE, "endpoint": "/v1/{object_id:>9}"}},
            "remote.endpoint",
            "placeholders take no format spec or conversion",
        ),
        (
            {"remote": {**REMOTE, "endpoint": "/v1/{object_id"}},
            "remote.endpoint",
            "'/v1/{object_id' is not a path template: expected '}' before end of string",
        ),
        (
            {"remote": {**REMOTE, "endpoint": "/v1/{object}/{who}"}},
            "remote.endpoint",
            "unknown placeholder(s) ['object', 'who']; use {object_id} and {tenant_id}",
        ),
        (
            {"remote": {**REMOTE, "endpoint": "/v1/{tenant_id}"}},
            "remote.endpoint",
            "must be a path containing {object_id}",
        ),
        (
            {"remote": {**REMOTE, "endpoint": "/v1/objects?id={object_id}"}},
            "remote.endpoint",
            "{object_id} must be in the path, not in the query or fragment",
        ),
        (
            {"remote": {**REMOTE, "endpoint": "/v1/objects#{object_id}"}},
            "remote.endpoint",
            "{object_id} must be in the path, not in the query or fragment",
        ),
        (
            {"remote": {**REMOTE, "endpoint": "/v1/{tenant_id}?o={object_id}&t={tenant_id}"}},
            "remote.endpoint",
            "{object_id} must be in the path, not in the query or fragment",
        ),
        (
            {"timestamp_timezone": "Mars/Olympus"},
            "timestamp_timezone",
            "'Mars/Olympus' is not an IANA time zone name such as 'UTC'",
        ),
        (
            {"timestamp_timezone": "../etc"},
            "timestamp_timezone",
            "'../etc' is not an IANA time zone name such as 'UTC'",
        ),
        (
            {"remote": {**REMOTE, "idempotency_header": "Idem Key"}},
            "remote.idempotency_header",
            "'Idem Key' is not an HTTP header name (letters, digits, '-')",
        ),
        (
            {
                "remote": {
                    **REMOTE,
                    "derivatives": [{"name": "object", "endpoint": "/v1/assets/{object_id}/x"}],
                }
            },
            "remote.derivatives",
            "'object' names the object itself (remote.endpoint); give the derivative another name",
        ),
        (
            {
                "remote": {
                    **REMOTE,
                    "derivatives": [
                        {"name": "thumbs", "endpoint": "/t/{object_id}"},
                        {"name": "thumbs", "endpoint": "/u/{object_id}", "method": "post"},
                    ],
                }
            },
            "remote.derivatives",
            "each derivative needs its own name; ['thumbs'] appear twice",
        ),
        (
            {"remote": {**REMOTE, "derivatives": [{"name": "thumbs", "endpoint": "/t/{id}"}]}},
            "remote.derivatives.0.endpoint",
            "unknown placeholder(s) ['id']; use {object_id} and {tenant_id}",
        ),
        (
            {"remote": {**REMOTE, "derivatives": [{"name": "thumbs"}]}},
            "remote.derivatives.0.endpoint",
            "required field is missing",
        ),
        (
            {"remote": {**REMOTE, "colour": 1}},
            "remote.colour",
            "unknown field; known fields are http_conn_id, endpoint, object_id_column, "
            "rate_per_second, max_rate_per_second, burst, pool, method, version_column, "
            "idempotency_header, limiter_scope, max_attempts, request_timeout_seconds, "
            "claim_batch, task_budget_seconds, lease_seconds, recovery_seconds, "
            "auth_failure_limit, backoff_base_seconds, backoff_max_seconds, "
            "not_found_is_deleted, held_statuses, not_found_breaker, derivatives",
        ),
        (
            {"batch_rows": 2000, "window_rows": 1000},
            "batch_rows",
            "2000 is larger than window_rows (1000); a delete batch must fit inside one window",
        ),
        (
            {"notify": {"http_conn_id": "e", "endpoint": "/e"}},
            "notify",
            "events announce remote deletions: it needs a remote section",
        ),
    ],
)
def test_each_problem_is_worded_exactly(overrides: dict, field: str, message: str) -> None:
    policy, problems = parse_policy("m", policy_fields("m", **overrides))
    assert policy is None
    assert [(p.field, p.message) for p in problems] == [(field, message)]
    assert str(problems[0]) == f"policy 'm', field '{field}': {message}"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-01", dt.datetime(2026, 1, 1, tzinfo=dt.UTC)),
        (dt.date(2026, 2, 3), dt.datetime(2026, 2, 3, tzinfo=dt.UTC)),
        (dt.datetime(2026, 2, 3, 4, 5), dt.datetime(2026, 2, 3, 4, 5, tzinfo=dt.UTC)),
        (
            "2026-01-01T06:00:00+02:00",
            dt.datetime(2026, 1, 1, 4, tzinfo=dt.UTC),
        ),
    ],
)
def test_start_dates_become_aware_datetimes(value: object, expected: dt.datetime) -> None:
    policy, problems = parse_policy("m", policy_fields("m", start_date=value))
    assert problems == []
    assert policy is not None
    assert policy.start_date == expected
    assert policy.start_date.tzinfo is not None


def test_a_problem_in_a_policy_mapping_that_is_not_a_mapping() -> None:
    policy, problems = parse_policy("m", ["not", "a", "mapping"])
    assert policy is None
    assert [str(p) for p in problems] == [
        "policy 'm', field '*': a policy must be a mapping of fields"
    ]
    policy, problems = parse_policy("m", {**policy_fields("m"), "name": "other"})
    assert problems[0].field == "name"
    assert problems[0].message.startswith("unknown field; known fields are schedule,")


def test_error_report_counts_the_policies_loaded_when_none_is(tmp_path: Path) -> None:
    """ "The other policies were loaded" was printed when every policy had a problem."""
    path = tmp_path / "policies.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "policies": {
                    "a": policy_fields("a", retain_days=0),
                    "b": policy_fields("b", owner=""),
                }
            }
        )
    )
    report = load_policies(path).error_report()
    assert report.splitlines()[-1] == "0 of 2 policies loaded; fix these to get their DAGs back."
    single = tmp_path / "single.yaml"
    single.write_text(yaml.safe_dump({"policies": {"a": policy_fields("a", retain_days=0)}}))
    assert (
        load_policies(single)
        .error_report()
        .endswith("\n0 of 1 policy loaded; fix these to get their DAGs back.")
    )


def test_error_report_lists_every_problem_and_says_the_rest_loaded(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "policies": {
                    "ok": policy_fields("ok"),
                    "a": policy_fields("a", retain_days=0),
                    "b": policy_fields("b", owner=""),
                }
            }
        )
    )
    loaded = load_policies(path)
    assert loaded.error_report() == (
        f"{path}: 2 problem(s) in retention policies:\n"
        "  - policy 'a', field 'retain_days': must be greater than 0, got 0\n"
        "  - policy 'b', field 'owner': must be a non-empty string\n"
        "1 of 3 policies loaded; fix these to get their DAGs back."
    )
    assert load_policies(tmp_path / "missing.yaml").error_report() == (
        f"{tmp_path / 'missing.yaml'}: file not found (set RETENTION_POLICIES or create it)"
    )
    clean = tmp_path / "clean.yaml"
    clean.write_text(yaml.safe_dump({"policies": {"ok": policy_fields("ok")}}))
    assert load_policies(clean).error_report() == ""


@pytest.mark.parametrize(
    ("text", "report"),
    [
        ("policies: [1, 2", "not valid YAML: "),
        ("- a\n- b\n", "expected a mapping with a 'policies:' mapping of name -> policy"),
        ("policies: []\n", "expected a mapping with a 'policies:' mapping of name -> policy"),
        ("policies: {}\nextra: 1\nmore: 2\n", "unknown top-level key(s): extra, more"),
        (
            "policies: {}\npolicies: {}\n",
            "key 'policies' appears 2 times (lines 1, 2); YAML would silently keep the last one",
        ),
    ],
)
def test_file_level_problems_are_worded_exactly(tmp_path: Path, text: str, report: str) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(text)
    loaded = load_policies(path)
    assert loaded.policies == []
    assert loaded.error_report().startswith(f"{path}: {report}")


def test_duplicate_keys_are_found_at_any_depth_with_their_lines() -> None:
    text = (
        "policies:\n"  # 1
        "  p:\n"  # 2
        "    tags: [a]\n"  # 3
        "    remote:\n"  # 4
        "      burst: 1\n"  # 5
        "      burst: 2\n"  # 6
        "      burst: 3\n"  # 7
        "    list:\n"  # 8
        "      - {x: 1, x: 2}\n"  # 9
    )
    found = duplicate_keys(yaml.compose(text, Loader=yaml.SafeLoader))
    assert sorted(found) == [
        (["policies", "p", "list", "0", "x"], [9, 9]),
        (["policies", "p", "remote", "burst"], [5, 6, 7]),
    ]
    assert duplicate_keys(None) == []


def test_pool_warnings_are_worded_exactly(tmp_path: Path) -> None:
    settings = tmp_path / "airflow_settings.yaml"
    settings.write_text("airflow:\n  pools:\n    - pool_name: known\n      pool_slot: 1\n")
    policies = [
        parse_policy("row", policy_fields("row", pool="typo"))[0],
        parse_policy(
            "remote",
            policy_fields(
                "remote",
                pool="known",
                remote={**REMOTE, "pool": "api_pool"},
                notify={"http_conn_id": "e", "endpoint": "/e", "pool": "known"},
            ),
        )[0],
        parse_policy("fine", policy_fields("fine", pool="default_pool"))[0],
    ]
    warnings = pool_warnings([p for p in policies if p is not None], settings)
    assert warnings == {
        "row": [
            "`pool` names pool `typo`, which airflow_settings.yaml does not create: create it "
            "(Admin → Pools) or its tasks are never scheduled."
        ],
        "remote": [
            "`remote.pool` names pool `api_pool`, which airflow_settings.yaml does not create: "
            "create it (Admin → Pools) or its tasks are never scheduled.",
            "`pool` (`known`) is unused: a remote policy's windows and drain run in "
            "`remote.pool` (`api_pool`).",
        ],
    }
    assert pool_warnings([p for p in policies if p is not None], tmp_path / "absent.yaml") == {
        "remote": [
            "`pool` (`known`) is unused: a remote policy's windows and drain run in "
            "`remote.pool` (`api_pool`)."
        ]
    }


@pytest.mark.parametrize(
    "endpoint",
    ["/v1/{object_id}?force=true", "/v1/{tenant_id}/{object_id}#x", "/v1/{object_id}?a=1&b=2#f"],
)
def test_a_query_or_fragment_after_the_object_id_is_fine(endpoint: str) -> None:
    policy, problems = parse_policy(
        "m", policy_fields("m", remote={**REMOTE, "endpoint": endpoint})
    )
    assert problems == []
    assert policy is not None
    assert policy.remote is not None
    assert policy.remote.endpoint == endpoint


def test_a_time_zone_name_is_kept_as_given() -> None:
    policy, problems = parse_policy("m", policy_fields("m", timestamp_timezone="Asia/Tokyo"))
    assert problems == []
    assert policy is not None
    assert policy.timestamp_timezone == "Asia/Tokyo"


def test_a_policy_name_that_is_not_a_dag_id_part_is_refused() -> None:
    policy, problems = parse_policy("bad-name", policy_fields("m"))
    assert policy is None
    assert [str(p) for p in problems] == [
        "policy 'bad-name', field 'name': "
        "use letters, digits and underscores only (it becomes the DAG id)"
    ]
