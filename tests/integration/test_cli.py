"""The operator's command line: it finds the checkout's settings itself, finds operations
by what an operator has at hand, and names the dead letters' failure classes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.plans import request
from retention.db.connection import Connection
from retention.policy import parse_policy
from retention.rows.deleter import delete_window
from retention.rows.planner import plan_windows
from tests.support.children import create_family, family_children, remote_family
from tests.support.env import ENV_FILE, ROOT
from tests.support.policies import policy_fields
from tests.support.remote import enqueue_all
from tests.support.tables import create_table, new, old


def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retention.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def add_operation(
    db: Connection,
    policy: str,
    row_key: int,
    object_id: str,
    *,
    state: str = "pending",
    failure_class: str | None = None,
    status: int | None = None,
) -> str:
    key = hashlib.sha256(f"{policy}|{row_key}|{object_id}".encode()).hexdigest()
    db.execute(
        "INSERT INTO retention.operations (operation_key, policy, policy_revision, table_name, "
        "row_key, object_id, version, state, failure_class, last_status_code, reason) "
        "VALUES (%s, %s, 1, 'public.media', %s, %s, '1', %s, %s, %s, %s)",
        (key, policy, row_key, object_id, state, failure_class, status, failure_class),
    )
    return key


@pytest.fixture
def ledger(db: Connection, unique_name: str) -> dict[str, Any]:
    """Three operations of a policy of its own: one done, two dead (one never answered)."""
    return {
        "policy": unique_name,
        "done": add_operation(db, unique_name, 101, f"{unique_name}-a", state="done", status=204),
        "dead_422": add_operation(
            db,
            unique_name,
            102,
            f"{unique_name}-b",
            state="dead",
            failure_class="http_422",
            status=422,
        ),
        "dead_timeout": add_operation(
            db, unique_name, 103, f"{unique_name}-c", state="dead", failure_class="timeout"
        ),
    }


def test_the_cli_loads_the_checkouts_settings_without_a_shell(
    ledger: dict[str, Any], tmp_path: Path
) -> None:
    """A clean environment, another folder: `.local/env` gives the connection and Airflow home."""
    if not ENV_FILE.is_file():
        pytest.skip("no .local/env in this checkout (run `make env`)")
    clean = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT / "plugins")}
    run = cli(
        "--conn-id",
        "retention_test",
        "dead-letters",
        "--policy",
        ledger["policy"],
        env=clean,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert f"object={ledger['policy']}-b" in run.stdout
    assert "2 dead operation(s)" in run.stdout
    explained = cli(
        "--conn-id", "retention_test", "explain", ledger["done"][:12], env=clean, cwd=tmp_path
    )
    assert explained.returncode == 0, explained.stderr
    assert f"operation {ledger['done']}" in explained.stdout


def test_settings_already_set_win_over_the_checkouts(
    ledger: dict[str, Any], tmp_path: Path
) -> None:
    if not ENV_FILE.is_file():
        pytest.skip("no .local/env in this checkout (run `make env`)")
    clean = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT / "plugins"),
        "AIRFLOW_CONN_RETENTION_TEST": "postgres://nobody@127.0.0.1:1/none",
    }
    run = cli("--conn-id", "retention_test", "dead-letters", env=clean, cwd=tmp_path)
    assert run.returncode != 0
    assert "port 1" in run.stderr or "127.0.0.1" in run.stderr


@pytest.mark.parametrize(
    ("term", "which"),
    [
        ("whole key", "dead_422"),
        ("key prefix", "dead_422"),
        ("upper-case prefix", "dead_422"),
        ("object id", "dead_422"),
        ("row key", "dead_422"),
    ],
)
def test_explain_finds_one_operation_by_what_the_operator_has(
    ledger: dict[str, Any], test_dsn: str, term: str, which: str
) -> None:
    key = ledger[which]
    given = {
        "whole key": key,
        "key prefix": key[:10],
        "upper-case prefix": key[:10].upper(),
        "object id": f"{ledger['policy']}-b",
        "row key": "102",
    }[term]
    run = cli("--dsn", test_dsn, "explain", given, "--policy", ledger["policy"])
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"operation {key}\n")
    assert "http_422" in run.stdout


def test_explain_lists_the_matches_when_there_are_several(
    db: Connection, ledger: dict[str, Any], test_dsn: str
) -> None:
    other = f"{ledger['policy']}_other"
    again = add_operation(db, other, 102, f"{other}-b")
    run = cli("--dsn", test_dsn, "explain", "102")
    assert run.returncode == 0, run.stderr
    listed = run.stdout.splitlines()
    assert any(line.startswith(ledger["dead_422"]) for line in listed)
    assert any(line.startswith(again) for line in listed)
    assert "operations match '102'" in run.stderr
    narrowed = cli("--dsn", test_dsn, "explain", "102", "--policy", other)
    assert narrowed.stdout.startswith(f"operation {again}\n")


def test_explain_lists_at_most_twenty(db: Connection, unique_name: str, test_dsn: str) -> None:
    for n in range(25):
        add_operation(db, unique_name, 5000 + n, "shared-object")
    run = cli("--dsn", test_dsn, "explain", "shared-object", "--policy", unique_name)
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.splitlines()) == 20
    assert "20+ operations" in run.stderr
    assert "showing the newest 20" in run.stderr


def test_explain_says_clearly_when_nothing_matches(ledger: dict[str, Any], test_dsn: str) -> None:
    run = cli("--dsn", test_dsn, "explain", "no-such-object", "--policy", ledger["policy"])
    assert run.returncode == 1
    assert run.stdout == ""
    assert (
        f"no operation of policy {ledger['policy']!r} matches 'no-such-object' as an operation "
        "key, a key prefix (4 or more hex digits), an object id or a row key"
    ) in run.stderr
    missing = "f" * 64
    whole = cli("--dsn", test_dsn, "explain", missing)
    assert whole.returncode == 1
    assert f"matches {missing!r}" in whole.stderr


def test_failure_class_without_a_value_lists_the_classes(
    ledger: dict[str, Any], test_dsn: str
) -> None:
    run = cli("--dsn", test_dsn, "dead-letters", "--policy", ledger["policy"], "--failure-class")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "failure classes of dead operations (count):",
        "  http_422: 1",
        "  timeout: 1",
    ]


def test_a_failure_class_that_matches_nothing_lists_those_that_exist(
    ledger: dict[str, Any], test_dsn: str
) -> None:
    run = cli(
        "--dsn",
        test_dsn,
        "dead-letters",
        "--policy",
        ledger["policy"],
        "--failure-class",
        "http_500",
    )
    assert run.returncode == 1
    assert "no dead operations of failure class 'http_500'" in run.stderr
    assert "http_422: 1" in run.stderr
    assert "timeout: 1" in run.stderr


def test_an_operation_that_never_got_an_answer_reads_no_response(
    ledger: dict[str, Any], test_dsn: str
) -> None:
    run = cli("--dsn", test_dsn, "dead-letters", "--policy", ledger["policy"])
    assert run.returncode == 0, run.stderr
    assert "timeout (no response)" in run.stdout
    assert "http_422 (HTTP 422)" in run.stdout
    assert "None" not in run.stdout.replace("tenant=None", "")


def test_runs_shows_progress_and_the_run_lease_holder(
    db: Connection, unique_name: str, test_dsn: str
) -> None:
    from retention.rows.deleter import delete_window
    from retention.runs.lease import take_run_lease
    from tests.support.policies import make_policy
    from tests.support.tables import create_table, old, plan

    create_table(db, unique_name, [(i, 1, old(i)) for i in range(1, 31)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5, window_per_tenant=False)
    windows = plan(db, policy, run_id="run-7")
    take_run_lease(db, unique_name, policy.dag_id, "run-7", lambda run_id: "running")
    delete_window(db, policy, windows[0], batch_rows=5, dry_run=False)
    shown = cli("--dsn", test_dsn, "runs", "--policy", unique_name)
    assert shown.returncode == 0, shown.stderr
    (line,) = shown.stdout.splitlines()
    assert line.startswith(f"{unique_name}  run-7  planned  cutoff ")
    assert "deleted 10 so far" in line
    assert f"windows: done 1 planned {len(windows) - 1}" in line
    assert line.endswith("[holds the run lease]")
    none = cli("--dsn", test_dsn, "runs", "--policy", f"{unique_name}_none")
    assert none.stdout.strip() == f"no runs recorded for policy '{unique_name}_none'"


def test_explain_shows_the_rows_of_each_table_waiting_with_the_row(
    db: Connection, unique_name: str, test_dsn: str, tmp_path: Path
) -> None:
    """A policy with children: explain's text counts the rows of the policy's table and
    of each listed child still there for the object's row key (issue 19's local side)."""
    fields = remote_family(db, unique_name)
    policy, problems = parse_policy(unique_name, fields)
    assert policy is not None, problems
    enqueue_all(db, policy)
    policies = tmp_path / "policies.yaml"
    policies.write_text(yaml.safe_dump({"policies": {unique_name: fields}}))
    env = {**os.environ, "RETENTION_POLICIES": str(policies)}
    run = cli("--dsn", test_dsn, "explain", "obj-2", "--policy", unique_name, env=env)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    (tables,) = [line for line in lines if line.startswith("  tables:")]
    assert tables.startswith("  tables:     present: still there for row 2, waiting with the row")
    assert f"    public.{unique_name}: 1 row(s) still there" in lines
    assert f"    public.{unique_name}_r: 3 row(s) still there" in lines
    as_json = cli("--dsn", test_dsn, "explain", "obj-2", "--policy", unique_name, "--json", env=env)
    assert json.loads(as_json.stdout)["tables"]["counts"][1] == {
        "table": f"public.{unique_name}_r",
        "rows": 3,
        "more": False,
        "not_counted": None,
    }


FAMILY = (1, 2, 4, 8)  # create_family's rows of one key, table by table


def _policies_env(tmp_path: Path, name: str, fields: dict[str, Any]) -> dict[str, str]:
    policies = tmp_path / "policies.yaml"
    policies.write_text(yaml.safe_dump({"policies": {name: fields}}))
    return {**os.environ, "RETENTION_POLICIES": str(policies)}


def test_explain_a_row_key_of_a_row_policy_shows_its_tables_and_holds_until_it_is_gone(
    db: Connection, unique_name: str, test_dsn: str, tmp_path: Path
) -> None:
    """A policy without remote: has no operation for a row: explain --policy P KEY
    answers with the row's record (issue 19): the rows of its table, its child and its
    grandchildren still there for the key, the holds keeping it, and once a run has
    deleted it, that it is gone."""
    create_family(db, unique_name)  # row k: 2 children, 4 grandchildren, 8 below those
    fields = policy_fields(
        unique_name, window_rows=1000, batch_rows=50, children=family_children(unique_name)
    )
    policy, problems = parse_policy(unique_name, fields)
    assert policy is not None, problems
    env = _policies_env(tmp_path, unique_name, fields)
    tables = [f"public.{unique_name}{suffix}" for suffix in ("", "_r", "_c", "_p")]

    def explained(key: str, *more: str) -> subprocess.CompletedProcess[str]:
        run = cli("--dsn", test_dsn, "explain", key, "--policy", unique_name, *more, env=env)
        assert run.returncode == 0, run.stderr
        return run

    lines = explained("1").stdout.splitlines()
    assert lines[:2] == [
        f"row 1 of policy {unique_name} (public.{unique_name}.id)",
        f"  row:        present: in public.{unique_name}; a run of the policy deletes it "
        "once it is older than the run's cutoff, its children with it in the same batch",
    ]
    assert lines[2].startswith("  tables:     present: still there for row 1, waiting with")
    assert lines[3:] == [
        f"    {table}: {n} row(s) still there" for table, n in zip(tables, FAMILY, strict=True)
    ]
    record = json.loads(explained("1", "--json").stdout)
    assert (record["row_key"], record["row"]["state"], record["holds"]) == (1, "present", [])
    assert record["tables"]["counts"] == [
        {"table": table, "rows": n, "more": False, "not_counted": None}
        for table, n in zip(tables, FAMILY, strict=True)
    ]

    placed = cli(
        "--dsn", test_dsn, "holds", "place", "--policy", unique_name, "--key", "3",
        "--reason", "case 12", env=env,
    )  # fmt: skip
    assert placed.returncode == 0, placed.stderr
    hold_id = int(placed.stdout.strip().splitlines()[-1])
    for window in plan_windows(db, request(policy)):
        delete_window(db, policy, window, batch_rows=50, dry_run=False)

    gone = explained("1").stdout.splitlines()
    assert gone[1].startswith(
        f"  row:        gone: not in public.{unique_name}: deleted (by a run, an erasure or "
        "by hand) or never there"
    )
    assert gone[2] == "  tables:     gone: no row of any table is there for row 1"
    assert gone[3:] == [f"    {table}: 0 row(s) still there" for table in tables]
    assert json.loads(explained("1", "--json").stdout)["row"]["state"] == "gone"

    held = explained("3").stdout.splitlines()
    assert held[0] == f"held by hold {hold_id} (key 3, policy {unique_name}: case 12)"
    assert held[1] == f"row 3 of policy {unique_name} (public.{unique_name}.id)"
    assert held[2] == (
        f"  row:        present: in public.{unique_name}; kept by hold {hold_id}: no run "
        "deletes it while a hold keeps it (lift with holds lift ID --reason …)"
    )
    assert held[4:] == [
        f"    {table}: {n} row(s) still there" for table, n in zip(tables, FAMILY, strict=True)
    ]
    tenant = cli(
        "--dsn", test_dsn, "holds", "place", "--policy", unique_name, "--tenant", "1",
        "--reason", "case 13", env=env,
    )  # fmt: skip
    assert tenant.returncode == 0, tenant.stderr
    tenant_id = int(tenant.stdout.strip().splitlines()[-1])
    record = json.loads(explained("3", "--json").stdout)
    assert [(h["id"], h["match"], h["value"]) for h in record["holds"]] == [
        (hold_id, "key", "3"),
        (tenant_id, "tenant", "1"),
    ], "a hold of the row's tenant keeps it too"


def test_explain_refuses_a_term_that_is_no_row_key_of_a_row_policy(
    db: Connection, unique_name: str, test_dsn: str, tmp_path: Path
) -> None:
    """A policy without remote: and without children: explain names the key column and
    its type for a term that is not one of its values, and prints nothing else; a row
    key's record has no tables (tables: null), only whether the row is there."""
    create_table(db, unique_name, [(1, 7, old()), (2, 7, new())])
    db.execute(f"ALTER TABLE public.{unique_name} ALTER COLUMN id TYPE integer")
    env = _policies_env(tmp_path, unique_name, policy_fields(unique_name))
    for term in ("abc", "2147483648", "1.5"):
        run = cli("--dsn", test_dsn, "explain", term, "--policy", unique_name, env=env)
        assert run.returncode == 2, (term, run.stdout, run.stderr)
        assert run.stdout == ""
        assert run.stderr.strip() == (
            f"explain: {term!r} is not a row key of policy {unique_name!r}: its key column "
            f"public.{unique_name}.id is integer (an integer from -2147483648 to 2147483647)"
        )
    run = cli("--dsn", test_dsn, "explain", "2", "--policy", unique_name, "--json", env=env)
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    assert (record["row"]["state"], record["tables"], record["holds"]) == ("present", None, [])


def test_explain_a_row_key_names_only_the_holds_that_keep_that_row(
    db: Connection, unique_name: str, test_dsn: str, tmp_path: Path
) -> None:
    """explain --policy P 42: a tenant hold "42" does not keep row 42 of tenant 7 (a run
    deletes it): the hold is listed apart as not keeping the row, never as "kept by"; a
    key hold 42 keeps it. The row is read through the policy's own connection, not the
    default one (here a database that does not answer)."""
    create_table(db, unique_name, [(42, 7, old()), (7, 42, old())])
    fields = policy_fields(unique_name)
    env = {
        **_policies_env(tmp_path, unique_name, fields),
        "AIRFLOW_CONN_RETENTION_TARGET": "postgres://nobody@127.0.0.1:1/none",
    }

    def place(*scope: str) -> int:
        placed = cli(
            "--dsn", test_dsn, "holds", "place", "--policy", unique_name, *scope,
            "--reason", "case 14", env=env,
        )  # fmt: skip
        assert placed.returncode == 0, placed.stderr
        return int(placed.stdout.strip().splitlines()[-1])

    def explained(*more: str) -> subprocess.CompletedProcess[str]:
        run = cli("explain", "42", "--policy", unique_name, *more, env=env)
        assert run.returncode == 0, run.stderr
        return run

    tenant_hold = place("--tenant", "42")
    lines = explained().stdout.splitlines()
    assert not any(line.startswith("held by") for line in lines), lines
    assert lines[:2] == [
        f"row 42 of policy {unique_name} (public.{unique_name}.id)",
        f"  row:        present: in public.{unique_name}; a run of the policy deletes it "
        "once it is older than the run's cutoff",
    ]
    assert lines[2:] == [
        f"also named 42, not keeping this row: hold {tenant_hold} (tenant 42, policy "
        f"{unique_name}: case 14) — not this row's tenant (its tenant is 7)"
    ]
    record = json.loads(explained("--json").stdout)
    assert record["holds"] == []
    assert [(h["id"], h["why_not"]) for h in record["also_named"]] == [
        (tenant_hold, "not this row's tenant (its tenant is 7)")
    ]

    key_hold = place("--key", "42")
    lines = explained().stdout.splitlines()
    assert lines[0] == f"held by hold {key_hold} (key 42, policy {unique_name}: case 14)"
    assert lines[2] == (
        f"  row:        present: in public.{unique_name}; kept by hold {key_hold}: no run "
        "deletes it while a hold keeps it (lift with holds lift ID --reason …)"
    )
    record = json.loads(explained("--json").stdout)
    assert [h["id"] for h in record["holds"]] == [key_hold]
    assert [h["id"] for h in record["also_named"]] == [tenant_hold]
