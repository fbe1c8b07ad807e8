"""The bad-input catalogue (docs/bad-inputs.md) stays true: enough rows, every test it names
exists, and every quote of what the user sees is what the code shows for that input.

This module feeds the rows that need no database or server to the real code (the
policy loader on a YAML file, ``run_settings``, the progress interval); the
integration tier does the rest (tests/integration/test_bad_input_catalogue.py), and
checks that every row that quotes something has a producer in one of the two.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from retention.erasures.request import ErasureRejected, validate
from retention.policy import load_policies
from retention.policy.params import ParamError, run_settings
from retention.progress import PROGRESS_SECONDS_VARIABLE, progress_interval
from tests.support.catalogue import Producers, Row, disagreements, pattern, row_id, rows
from tests.support.env import ROOT
from tests.support.policies import REQUIRED_REMOTE, make_policy, nested_children, policy_fields


def catalogue() -> list[tuple[str, str]]:
    return [
        match
        for row in rows()
        for match in re.findall(r"`(test_[a-z0-9_]+)` \(([^)]+)\)", row.test)
    ]


def test_the_catalogue_has_at_least_forty_inputs() -> None:
    assert len(catalogue()) >= 40


def test_every_test_the_catalogue_names_exists() -> None:
    missing = [
        f"{path}::{name}"
        for name, path in catalogue()
        if f"def {name}(" not in (ROOT / "tests" / path).read_text()
    ]
    assert missing == []


UNIT = Producers()

# The policy-file rows whose input is YAML as a user would write it (a dotted key stands
# for a field of a section): the producer loads exactly that text.
WRITTEN_AS_YAML = (
    "an unknown field `colour: 1`",
    '`retain_days: "30"`',
    "`retain_days: 0`",
    "`retain_days: 36501`",
    "`max_lag_hours: .inf`",
    "`remote.rate_per_second: .nan`",
    '`remote.rate_per_second: "5"` (a string)',
    "`remote.rate_per_second: auto` and no max_rate_per_second",
    "`remote.max_rate_per_second: 50` with `remote.rate_per_second: 5`",
    '`window_per_tenant: "yes"` (a string)',
    '`pool: "  "`',
    '`key_column: "id\\n"` (a trailing newline)',
    "`table: a.b.c`",
    "`start_date: soon`",
    '`schedule: "@fortnightly"`',
    '`schedule: "99 99 * * *"`',
    "`remote.method: GET`",
    "`remote.endpoint: /v1/{object}/{who}`",
    "`remote.endpoint: /v1/assets/{{object_id}}` (renders a literal path)",
    '`remote.derivatives: [{name: object, endpoint: "/v1/assets/{object_id}/x"}]`',
    '`remote.derivatives: [{name: thumbs, endpoint: "/t/{object_id}"}, '
    '{name: thumbs, endpoint: "/u/{object_id}"}]`',
    '`remote.derivatives: [{name: thumbs, endpoint: "/t/{id}"}]`',
    '`remote.idempotency_header: "Idem Key"`',
    "`batch_rows: 2000` with `window_rows: 1000`",
    "`alerts: {}`",
    "`timestamp_timezone: Mars/Olympus`",
)


def fields_written_in(row: Row) -> dict[str, Any]:
    """The fields the row's input writes: each backticked piece read as YAML."""
    fields: dict[str, Any] = {}
    for piece in re.findall(r"`([^`]+)`", row.input):
        for key, value in yaml.safe_load(piece).items():
            section, _, name = str(key).rpartition(".")
            if section:
                fields.setdefault(section, dict(REQUIRED_REMOTE) if section == "remote" else {})
                fields[section][name] = value
            else:
                fields[key] = value
    return fields


def problems_in(tmp_path: Path, text: str | None) -> list[str]:
    """What the policy loader says about a policies file with ``text`` (None: no file)."""
    path = tmp_path / "policies.yaml"
    if text is not None:
        path.write_text(text)
    loaded = load_policies(path, tmp_path / "airflow_settings.yaml")
    if loaded.file_error:
        return [loaded.error_report().replace(str(path), "<path>")]
    return [str(problem) for problem in loaded.problems]


def policies_file(**policies: dict[str, Any]) -> str:
    return yaml.safe_dump({"policies": policies}, sort_keys=False)


@UNIT.of(*WRITTEN_AS_YAML)
def written_as_yaml(row: Row, tmp_path: Path) -> list[str]:
    return problems_in(tmp_path, policies_file(m=policy_fields("m", **fields_written_in(row))))


POLICY_FIELDS: dict[str, dict[str, Any]] = {
    "a required field left out (`table`)": {"table": None},
    "`children:` nested four levels deep": {"children": nested_children(4)},
    "the same table listed twice in `children:` (`c` and `public.c`)": {
        "children": [{"table": "c", "foreign_key": "a"}, {"table": "public.c", "foreign_key": "b"}]
    },
    "an `ignore_foreign_keys:` entry without `reason`": {
        "ignore_foreign_keys": [{"constraint": "audit_fk"}]
    },
    "a 101-character tag": {"tags": ["x" * 101]},
    "`notify:` without `remote:`": {"notify": {"http_conn_id": "events", "endpoint": "/e"}},
    "`alerts.on_lag` without `lag_minutes`": {"alerts": {"on_lag": "ops"}},
    "`alerts.deadline_minutes` without `on_deadline`": {
        "alerts": {"on_dirty": "ops", "deadline_minutes": 30}
    },
}


@UNIT.of(*POLICY_FIELDS)
def described_fields(row: Row, tmp_path: Path) -> list[str]:
    fields = policy_fields("m", **POLICY_FIELDS[row.input])
    return problems_in(tmp_path, policies_file(m=fields))


@UNIT.of("a policy named `replay`")
def policy_named_replay(row: Row, tmp_path: Path) -> list[str]:
    return problems_in(tmp_path, policies_file(replay=policy_fields("replay")))


@UNIT.of("a key written twice in one policy")
def key_written_twice(row: Row, tmp_path: Path) -> list[str]:
    return problems_in(tmp_path, policies_file(m=policy_fields("m")) + "    retain_days: 7\n")


@UNIT.of("two policies sharing a `limiter_scope` at different rates")
def scope_shared_at_two_rates(row: Row, tmp_path: Path) -> list[str]:
    def remote(rate: float) -> dict[str, Any]:
        return {**REQUIRED_REMOTE, "limiter_scope": "shared_api", "rate_per_second": rate}

    text = policies_file(
        a=policy_fields("a", remote=remote(5)), b=policy_fields("b", remote=remote(10))
    )
    return problems_in(tmp_path, text)


@UNIT.of("the file is not YAML")
def not_yaml(row: Row, tmp_path: Path) -> list[str]:
    return problems_in(tmp_path, "policies: [1, 2")


@UNIT.of("the file is missing")
def missing_file(row: Row, tmp_path: Path) -> list[str]:
    return problems_in(tmp_path, None)


@UNIT.of("`RETENTION_PROGRESS_SECONDS=soon` (or 0)")
def progress_seconds(row: Row, tmp_path: Path) -> list[str]:
    shown = []
    for value in ("soon", "0"):
        with pytest.raises(ValueError, match=PROGRESS_SECONDS_VARIABLE) as refused:
            progress_interval({PROGRESS_SECONDS_VARIABLE: value})
        shown.append(str(refused.value))
    return shown


@UNIT.of(
    "`window_rows: 10000001`",
    "`batch_rows: 500` with `window_rows: 100`",
    '`dry_run: "yes"`',
)
def trigger_params(row: Row, tmp_path: Path) -> list[str]:
    """The params as the row writes them (YAML, as the trigger form's JSON would carry them)."""
    params = fields_written_in(row)
    with pytest.raises(ParamError) as refused:
        run_settings(make_policy("p", window_rows=1000, batch_rows=100), params)
    return [str(refused.value)]


ERASURE_ASKS: dict[str, dict[str, Any]] = {
    '`erase --reason " "` (an empty reason)': {"reason": " "},
    "`erase --policy no_such_policy`": {"policy": "no_such_policy"},
    "`erase --deadline 2020-01-01T00:00:00+00:00` (in the past)": {
        "deadline": dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    },
    "`erase --key seven`": {"scope": "key", "value": "seven"},
    "`erase --object obj-1` on a policy without `remote:`": {"scope": "object", "value": "obj-1"},
    "`erase --request-key hint:msg_1:obj-1` (a request key starting with `hint:`; the same as "
    "`request_key` of `POST /retention/erasures`)": {"request_key": "hint:msg_1:obj-1"},
}


@UNIT.of(*ERASURE_ASKS)
def erasure_requests(row: Row, tmp_path: Path) -> list[str]:
    """The request as the CLI passes it to the one validation every entry point shares."""
    policy = make_policy("p")
    asked = {
        "policy": "p",
        "scope": "tenant",
        "value": "7",
        "reason": "ticket 1",
        "requested_by": "test",
        **ERASURE_ASKS[row.input],
    }
    with pytest.raises(ErasureRejected) as refused:
        validate({"p": policy}, **asked)
    return [str(refused.value)]


@pytest.mark.parametrize("row", UNIT.rows(), ids=row_id)
def test_each_quote_is_what_the_code_shows_for_its_input(row: Row, tmp_path: Path) -> None:
    shown = UNIT[row.input](row, tmp_path)
    problems = disagreements(row.quotes, shown)
    assert not problems, "\n".join([f"row {row.input!r}:", *problems])


def test_a_quote_is_literal_text_where_an_ellipsis_stands_for_any_text() -> None:
    assert pattern("a … b").fullmatch("a x\ny b")
    assert not pattern("a … b").fullmatch("a x b c"), "the whole message, not a part of it"
    assert not pattern("[1] (x)").fullmatch("1 x"), "no regular expression in a quote"
    assert disagreements(["401 no …"], ["401 no key 'x'", "403 no"]) == [
        "shown but not quoted: '403 no'"
    ]
