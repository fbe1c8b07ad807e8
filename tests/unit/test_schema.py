"""The JSON Schema, its checked-in copy, docs/policies.md's field table and the shipped file
agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import yaml

import retention
from retention.paths import DEFAULT_POLICIES_PATH, POLICY_SCHEMA_PATH
from retention.policy.schema import FIELD_TABLE_END, FIELD_TABLE_START, field_table, schema_text
from tests.support.docs import docs_page
from tests.support.env import ROOT


def test_checked_in_schema_is_current() -> None:
    assert POLICY_SCHEMA_PATH.read_text() == schema_text(), (
        "run `python -m retention.cli schema --write` (make schema)"
    )


def test_the_policies_page_field_table_is_generated_from_the_schema() -> None:
    page = docs_page("policies")
    start = page.index(FIELD_TABLE_START) + len(FIELD_TABLE_START)
    table = page[start : page.index(FIELD_TABLE_END)]
    assert table.strip() == field_table(), "run `make schema`"


def test_cli_prints_the_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "retention.cli", "schema"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(Path(retention.__file__).resolve().parents[1])},
    ).stdout
    assert json.loads(out) == json.loads(schema_text())


def test_shipped_policies_validate_against_the_schema_editors_use() -> None:
    text = DEFAULT_POLICIES_PATH.read_text()
    assert (
        text.splitlines()[0] == "# yaml-language-server: $schema=./retention_policies.schema.json"
    )
    schema = json.loads(POLICY_SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(text))


def test_the_schema_catches_what_the_model_catches() -> None:
    schema = json.loads(POLICY_SCHEMA_PATH.read_text())
    document = yaml.safe_load(DEFAULT_POLICIES_PATH.read_text())
    document["policies"]["event_logs"]["retain_days"] = 0
    document["policies"]["event_logs"]["colour"] = "blue"
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(document))
    assert len(errors) == 2
