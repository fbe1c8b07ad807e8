"""Policy file validation: every problem names the policy and the field."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml
from conftest import policy_fields

from retention.policy import load_policies, parse_policy


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
    assert (policy.table.schema, policy.table.name) == ("public", "events")


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
