"""Policy file validation: every problem names the policy and the field (pure, no database)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from retention.policy import load_policies, parse_policy
from retention.policy.model import AUTO_STARTING_RATE, COLUMN_FIELDS, Policy
from tests.support.policies import REQUIRED_REMOTE as REMOTE
from tests.support.policies import nested_children, policy_fields


def write_policies(tmp_path: Path, policies: dict) -> Path:
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({"policies": policies}, sort_keys=False))
    return path


def test_valid_policy_parses_with_defaults() -> None:
    policy, problems = parse_policy("event_logs", policy_fields("event_logs"))
    assert problems == []
    assert policy is not None
    assert policy.dag_id == "retention__event_logs"
    assert str(policy.table) == "public.event_logs"
    assert policy.start_date == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert policy.owner == "data-platform"


def test_table_without_schema_defaults_to_public() -> None:
    policy, _ = parse_policy("p", policy_fields("p", table="events"))
    assert policy is not None
    assert (policy.table_spec.schema, policy.table_spec.name) == ("public", "events")


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"colour": "blue"}, "colour", "unknown field"),
        ({"key_column": "id; DROP TABLE x"}, "key_column", "not a plain SQL identifier"),
        ({"table": "public.events.extra"}, "table", "schema.table"),
        ({"table": 'public."odd"'}, "table", "schema.table"),
        ({"tenant_column": "tenant-id"}, "tenant_column", "not a plain SQL identifier"),
        ({"retain_days": 0}, "retain_days", "greater than 0"),
        ({"retain_days": -3}, "retain_days", "greater than 0"),
        ({"retain_days": "30"}, "retain_days", "whole number"),
        ({"retain_days": True}, "retain_days", "whole number"),
        ({"batch_rows": 2000, "window_rows": 1000}, "batch_rows", "larger than window_rows"),
        ({"table": None}, "table", "required field is missing"),
        ({"schedule": "@fortnightly"}, "schedule", "unknown preset"),
        ({"schedule": "every day"}, "schedule", "cron expression"),
        ({"start_date": "yesterday"}, "start_date", "ISO date"),
        ({"pool": ""}, "pool", "non-empty string"),
        ({"window_per_tenant": "yes"}, "window_per_tenant", "true or false"),
    ],
)
def test_bad_field_is_named(overrides: dict, field: str, words: str) -> None:
    policy, problems = parse_policy("media", policy_fields("media", **overrides))
    assert policy is None
    assert any(p.field == field and words in p.message for p in problems), problems
    assert all(p.policy == "media" for p in problems)
    assert f"policy 'media', field '{field}'" in "\n".join(str(p) for p in problems)


def test_one_bad_policy_does_not_hide_the_good_ones(tmp_path: Path) -> None:
    path = write_policies(
        tmp_path,
        {
            "good": policy_fields("good"),
            "bad": policy_fields("bad", retain_days=0),
            "also_good": policy_fields("also_good"),
        },
    )
    loaded = load_policies(path)
    assert [p.name for p in loaded.policies] == ["good", "also_good"]
    report = loaded.error_report()
    assert "policy 'bad', field 'retain_days'" in report


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("policies: [1, 2", "not valid YAML"),
        ("just a string", "expected a mapping"),
        ("policies: {}\nextra: 1", "unknown top-level key"),
    ],
)
def test_broken_file_is_reported(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(text)
    loaded = load_policies(path)
    assert loaded.policies == []
    assert words in loaded.error_report()


def test_missing_file_is_reported(tmp_path: Path) -> None:
    loaded = load_policies(tmp_path / "nope.yaml")
    assert "file not found" in loaded.error_report()


def test_defaults_are_stated_once_and_remote_policies_get_a_lag_limit() -> None:
    plain, _ = parse_policy("p", policy_fields("p"))
    assert plain is not None
    assert plain.max_lag_hours is None
    assert (plain.timeouts.lock_ms, plain.timeouts.statement_ms) == (1000, 10_000)
    remote = dict(REMOTE)
    policy, problems = parse_policy("r", policy_fields("r", remote=remote))
    assert problems == []
    assert policy is not None
    assert policy.max_lag_hours == 72
    assert policy.remote is not None
    assert (policy.remote.scope, policy.remote.max_attempts, policy.remote.lease) == ("api", 8, 60)


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        (
            {"remote": {**REMOTE, "rate_per_second": float("inf")}},
            "remote.rate_per_second",
            "finite",
        ),
        (
            {"remote": {**REMOTE, "rate_per_second": float("nan")}},
            "remote.rate_per_second",
            "finite",
        ),
        ({"remote": {**REMOTE, "rate_per_second": 0}}, "remote.rate_per_second", "greater than 0"),
        ({"remote": {**REMOTE, "burst": 1.5}}, "remote.burst", "whole number"),
        ({"max_lag_hours": float("inf")}, "max_lag_hours", "finite"),
        ({"schedule": "99 99 * * *"}, "schedule", "not a cron expression"),
        ({"schedule": "0 0 * *"}, "schedule", "not a cron expression"),
        ({"tags": ["x" * 101]}, "tags", "at most 100 characters"),
        ({"tags": [""]}, "tags", "non-empty"),
        ({"key_column": "id\n"}, "key_column", "not a plain SQL identifier"),
        ({"table": "public.events\n"}, "table", "schema.table"),
        (
            {"remote": {**REMOTE, "idempotency_header": "Idem-Key\n"}},
            "remote.idempotency_header",
            "header",
        ),
        ({"remote": {**REMOTE, "colour": 1}}, "remote.colour", "unknown field"),
        ({"remote": {**REMOTE, "method": "GET"}}, "remote.method", "must be one of"),
        (
            {"remote": {**REMOTE, "endpoint": "/v1/{object}"}},
            "remote.endpoint",
            "unknown placeholder",
        ),
        ({"remote": {**REMOTE, "endpoint": "/v1/{{object_id}}"}}, "remote.endpoint", "{object_id}"),
        (
            {"remote": {**REMOTE, "endpoint": "/t/{tenant_id}/{object_id}"}, "tenant_column": None},
            "remote.endpoint",
            "tenant_column",
        ),
        (
            {"remote": {**REMOTE, "lease_seconds": 5}},
            "remote.lease_seconds",
            "longer than request_timeout",
        ),
        (
            {
                "remote": REMOTE,
                "notify": {"http_conn_id": "e", "endpoint": "/e", "lease_seconds": 9},
            },
            "notify.lease_seconds",
            "longer than timeout_seconds",
        ),
        ({"pool": "   "}, "pool", "non-empty string"),
        ({"owner": " "}, "owner", "non-empty string"),
        ({"remote": {**REMOTE, "http_conn_id": " "}}, "remote.http_conn_id", "non-empty"),
        ({"remote": "yes"}, "remote", "mapping"),
        ({"notify": {"http_conn_id": "e", "endpoint": "/e"}}, "notify", "needs a remote section"),
        ({"remote": REMOTE, "notify": {"http_conn_id": "e"}}, "notify.endpoint", "required"),
        (
            {
                "remote": REMOTE,
                "notify": {"http_conn_id": "e", "endpoint": "/e", "max_attempts": 0},
            },
            "notify.max_attempts",
            "greater than 0",
        ),
        (
            {"remote": REMOTE, "notify": {"http_conn_id": "e", "endpoint": "/e", "x": 1}},
            "notify.x",
            "unknown field",
        ),
        ({"window_rows": 10_000_001, "batch_rows": 10}, "window_rows", "at most 10000000"),
    ],
)
def test_bad_remote_notify_and_numeric_fields_are_named(overrides, field, words) -> None:
    policy, problems = parse_policy("media", policy_fields("media", **overrides))
    assert policy is None
    assert any(p.field == field and words in p.message for p in problems), problems


@pytest.mark.parametrize("name", ["media\n", "x" * 101, "has space", ""])
def test_bad_policy_names_are_refused(name: str) -> None:
    policy, problems = parse_policy(name, policy_fields("media"))
    assert policy is None
    assert problems[0].field == "name"


def test_a_policy_may_not_take_the_replay_dags_id() -> None:
    """retention__replay is the package's own DAG: a policy named replay would shadow it."""
    policy, problems = parse_policy("replay", policy_fields("replay"))
    assert policy is None
    assert problems[0].field == "name"
    assert "retention__replay is the package's own DAG" in problems[0].message


def test_lowercase_methods_and_numeric_descriptions_still_load() -> None:
    policy, problems = parse_policy(
        "p", policy_fields("p", description=2026, remote={**REMOTE, "method": "post"})
    )
    assert problems == []
    assert policy is not None
    assert (policy.description, policy.remote.method) == ("2026", "POST")


def test_duplicate_keys_are_refused_with_their_lines(tmp_path: Path) -> None:
    good = yaml.safe_dump({"policies": {"good": policy_fields("good")}})
    bad = yaml.safe_dump(policy_fields("bad"), sort_keys=False).replace("\n", "\n    ")
    path = tmp_path / "policies.yaml"
    path.write_text(f"{good}  bad:\n    {bad}retain_days: 7\n")
    loaded = load_policies(path)
    assert [p.name for p in loaded.policies] == ["good"]
    (problem,) = loaded.problems
    assert (problem.policy, problem.field) == ("bad", "retain_days")
    assert "appears 2 times" in problem.message


def test_policies_sharing_a_limiter_scope_must_agree(tmp_path: Path) -> None:
    def remote(rate: float) -> dict:
        return {**REMOTE, "limiter_scope": "shared_api", "rate_per_second": rate}

    path = write_policies(
        tmp_path,
        {
            "a": policy_fields("a", remote=remote(5)),
            "b": policy_fields("b", remote=remote(10)),
            "c": policy_fields("c", remote={**REMOTE, "limiter_scope": "other"}),
            "d": policy_fields("d", remote=remote(5)),
        },
    )
    loaded = load_policies(path)
    assert [p.name for p in loaded.policies] == ["a", "c", "d"], "the first of a scope stays"
    (problem,) = loaded.problems
    assert (problem.policy, problem.field) == ("b", "remote.limiter_scope")
    assert "rate_per_second 10.0 (policy 'a' has 5.0)" in problem.message


def test_auto_rate_starts_low_under_its_ceiling_and_a_number_is_unchanged() -> None:
    auto, problems = parse_policy(
        "a",
        policy_fields("a", remote={**REMOTE, "rate_per_second": "auto", "max_rate_per_second": 40}),
    )
    assert problems == []
    assert auto is not None
    assert auto.remote is not None
    assert auto.remote.auto_rate
    assert (auto.remote.rate_ceiling, auto.remote.starting_rate) == (40, AUTO_STARTING_RATE)
    slow, _ = parse_policy(
        "s",
        policy_fields(
            "s", remote={**REMOTE, "rate_per_second": "auto", "max_rate_per_second": 0.2}
        ),
    )
    assert slow is not None
    assert slow.remote is not None
    assert slow.remote.starting_rate == 0.2, "never above the ceiling"
    fixed, _ = parse_policy("f", policy_fields("f", remote={**REMOTE, "rate_per_second": 7.5}))
    assert fixed is not None
    assert fixed.remote is not None
    assert not fixed.remote.auto_rate
    assert (fixed.remote.rate_ceiling, fixed.remote.starting_rate) == (7.5, 7.5)


def test_policies_sharing_a_scope_must_agree_on_an_auto_rates_ceiling(tmp_path: Path) -> None:
    def remote(ceiling: float) -> dict:
        auto = {"rate_per_second": "auto", "max_rate_per_second": ceiling}
        return {**REMOTE, "limiter_scope": "shared_api", **auto}

    path = write_policies(
        tmp_path,
        {"a": policy_fields("a", remote=remote(50)), "b": policy_fields("b", remote=remote(20))},
    )
    (problem,) = load_policies(path).problems
    assert (problem.policy, problem.field) == ("b", "remote.limiter_scope")
    assert "max_rate_per_second 20.0 (policy 'a' has 50.0)" in problem.message


def test_policies_sharing_a_scope_must_agree_on_recovery_and_database(tmp_path: Path) -> None:
    path = write_policies(
        tmp_path,
        {
            "a": policy_fields("a", remote=REMOTE),
            "b": policy_fields("b", remote={**REMOTE, "recovery_seconds": 5}),
            "c": policy_fields("c", remote=REMOTE, postgres_conn_id="other_db"),
        },
    )
    loaded = load_policies(path)
    assert [p.name for p in loaded.policies] == ["a"]
    messages = {p.policy: p.message for p in loaded.problems}
    assert "recovery_seconds 5.0" in messages["b"]
    assert "postgres_conn_id 'other_db'" in messages["c"]


def test_a_malformed_settings_file_never_breaks_loading(tmp_path: Path) -> None:
    settings = tmp_path / "airflow_settings.yaml"
    settings.write_text("- just\n- a list\n")
    path = write_policies(tmp_path, {"typo": policy_fields("typo", pool="knwon")})
    loaded = load_policies(path, settings)
    assert [p.name for p in loaded.policies] == ["typo"]
    assert loaded.warnings == {}


def test_unknown_pools_are_warnings_for_the_dag_docs(tmp_path: Path) -> None:
    settings = tmp_path / "airflow_settings.yaml"
    settings.write_text("airflow:\n  pools:\n    - pool_name: known\n      pool_slot: 2\n")
    path = write_policies(
        tmp_path,
        {
            "known_pool": policy_fields("known_pool", pool="known"),
            "typo": policy_fields("typo", pool="knwon"),
            "remote": policy_fields("remote", pool="known", remote=REMOTE),
        },
    )
    loaded = load_policies(path, settings)
    assert [p.name for p in loaded.policies] == ["known_pool", "typo", "remote"]
    assert "known_pool" not in loaded.warnings
    assert "pool `knwon`" in loaded.warnings["typo"][0]
    assert any("remote.pool" in w for w in loaded.warnings["remote"])
    assert any("is unused" in w for w in loaded.warnings["remote"])


def column_naming_fields(
    model: type[BaseModel], prefix: str = "", seen: frozenset[type] = frozenset()
) -> set[str]:
    """Every field of the model and its sections whose name says it names a column (a
    section nested in itself, such as ``children``, is walked once)."""
    found: set[str] = set()
    for name, info in model.model_fields.items():
        if name.endswith("_column"):
            found.add(prefix + name)
        for kind in getattr(info.annotation, "__args__", (info.annotation,)):
            if isinstance(kind, type) and issubclass(kind, BaseModel) and kind not in seen:
                found |= column_naming_fields(kind, f"{prefix}{name}.", seen | {model})
    return found


def test_every_column_naming_field_is_checked_against_the_table() -> None:
    """The table check looks up the fields of COLUMN_FIELDS: a field added later that
    names a column (``*_column``) must be listed there, or a typo in it is found only by
    whichever task reads it first, and retried."""
    assert set(COLUMN_FIELDS) == column_naming_fields(Policy)
    remote = {**REMOTE, "object_id_column": "asset", "version_column": "rev"}
    policy, _ = parse_policy("m", policy_fields("m", remote=remote))
    assert policy is not None
    assert policy.named_columns() == {
        "key_column": "id",
        "timestamp_column": "created_at",
        "tenant_column": "tenant_id",
        "remote.object_id_column": "asset",
        "remote.version_column": "rev",
    }
    plain, _ = parse_policy("m", policy_fields("m", tenant_column=None))
    assert plain is not None
    assert plain.named_columns() == {"key_column": "id", "timestamp_column": "created_at"}


def test_children_nest_at_most_three_levels_and_name_no_table_twice() -> None:
    policy, problems = parse_policy("m", policy_fields("m", children=nested_children(3)))
    assert policy is not None, problems
    assert [(depth, child.table) for depth, child in policy.child_tables()] == [
        (1, "public.level_1"),
        (2, "public.level_2"),
        (3, "public.level_3"),
    ]
    _, problems = parse_policy("m", policy_fields("m", children=nested_children(4)))
    assert [str(p) for p in problems] == [
        "policy 'm', field 'children': nested 4 levels deep; at most 3 are allowed"
    ]
    twice = [{"table": "c", "foreign_key": "a"}, {"table": "public.c", "foreign_key": "b"}]
    _, problems = parse_policy("m", policy_fields("m", children=twice))
    assert [str(p) for p in problems] == [
        "policy 'm', field 'children': public.c listed more than once (or is the policy's table)"
    ]
    _, problems = parse_policy(
        "m", policy_fields("m", ignore_foreign_keys=[{"constraint": "audit_fk"}])
    )
    assert [str(p) for p in problems] == [
        "policy 'm', field 'ignore_foreign_keys.0.reason': required field is missing"
    ]
