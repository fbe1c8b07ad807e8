"""``erase`` and ``explain --erasure`` as an operator types them: the id is the last line,
the same request twice is one erasure, and bad input says why and writes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from retention.db.connection import Connection
from tests.integration.test_cli import cli
from tests.support.policies import policy_fields
from tests.support.tables import count, create_table, old


@pytest.fixture
def env(tmp_path: Path, unique_name: str) -> dict[str, str]:
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({"policies": {unique_name: policy_fields(unique_name)}}))
    return {**os.environ, "RETENTION_POLICIES": str(path)}


def erase(test_dsn: str, env: dict[str, str], policy: str, *extra: str):
    return cli("--dsn", test_dsn, "erase", "--policy", policy, *extra, env=env)


def erasures_of(db: Connection, policy: str) -> int:
    return count(db, "SELECT count(*) FROM retention.erasures WHERE policy = %s", policy)


def test_erase_prints_the_id_last_and_the_same_request_twice_is_one_erasure(
    db: Connection, unique_name: str, test_dsn: str, env: dict[str, str]
) -> None:
    first = erase(test_dsn, env, unique_name, "--tenant", "7", "--reason", "ticket 12")
    assert first.returncode == 0, first.stderr
    erasure_id = first.stdout.strip().splitlines()[-1]
    again = erase(test_dsn, env, unique_name, "--tenant", "7", "--reason", "ticket 12")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines()[-1] == erasure_id
    assert "already requested" in again.stdout
    assert erasures_of(db, unique_name) == 1
    shown = cli("--dsn", test_dsn, "explain", "--erasure", erasure_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "state: requested" in shown.stdout
    assert "deadline: " in shown.stdout
    assert "blocking holds: none" in shown.stdout
    listed = cli("--dsn", test_dsn, "erasures", "--policy", unique_name, env=env)
    assert listed.stdout.startswith(f"{erasure_id}  {unique_name}  tenant=7  requested")


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (("--tenant", "7", "--reason", " "), "erase: the reason is empty"),
        (
            ("--tenant", "7", "--reason", "x", "--deadline", "2020-01-01T00:00:00+00:00"),
            "erase: the deadline 2020-01-01T00:00:00+00:00 is in the past",
        ),
        (("--tenant", "7", "--reason", "x", "--deadline", "soon"), "erase: --deadline 'soon'"),
    ],
)
def test_erase_refuses_bad_input_and_writes_nothing(
    db: Connection, unique_name: str, test_dsn: str, env: dict[str, str], extra, says
) -> None:
    run = erase(test_dsn, env, unique_name, *extra)
    assert run.returncode == 2
    assert says in run.stderr
    assert "Nothing was written." in run.stderr
    assert erasures_of(db, unique_name) == 0


def test_erase_refuses_an_unknown_policy(
    db: Connection, unique_name: str, test_dsn: str, env: dict[str, str]
) -> None:
    run = erase(test_dsn, env, "no_such_policy", "--tenant", "7", "--reason", "x")
    assert run.returncode == 2
    assert "erase: unknown policy 'no_such_policy'" in run.stderr
    assert erasures_of(db, "no_such_policy") == 0


# a connection nobody answers on: where the default connection id must not lead
UNREACHABLE = json.dumps({"conn_type": "postgres", "host": "127.0.0.1", "port": 1})


def test_erase_writes_to_the_policys_own_database_and_refuses_another(
    db: Connection, unique_name: str, env: dict[str, str]
) -> None:
    """The erasure must be where the policy's deletes (and its erasure DAG) look: its
    postgres_conn_id, not the CLI's default connection."""
    env = {**env, "AIRFLOW_CONN_RETENTION_TARGET": UNREACHABLE}
    asked = cli("erase", "--policy", unique_name, "--tenant", "7", "--reason", "t 1", env=env)
    assert asked.returncode == 0, asked.stderr
    assert erasures_of(db, unique_name) == 1
    elsewhere = cli(
        "--conn-id", "retention_target", "erase", "--policy", unique_name, "--tenant", "8",
        "--reason", "t 2", env=env,
    )  # fmt: skip
    assert elsewhere.returncode == 2
    assert "deletes through connection 'retention_test', not --conn-id" in elsewhere.stderr
    assert "Nothing was written" in elsewhere.stderr
    assert erasures_of(db, unique_name) == 1


def test_erase_refuses_a_request_key_reused_for_another_request(
    db: Connection, unique_name: str, test_dsn: str, env: dict[str, str]
) -> None:
    key = ("--request-key", f"k-{unique_name}")
    first = erase(test_dsn, env, unique_name, "--tenant", "7", "--reason", "t 1", *key)
    assert first.returncode == 0, first.stderr
    other = erase(test_dsn, env, unique_name, "--tenant", "7", "--reason", "t 2", *key)
    assert other.returncode == 2
    assert "differs in reason" in other.stderr
    assert "Nothing was written" in other.stderr
    assert erasures_of(db, unique_name) == 1


def test_erase_reads_the_scope_through_its_columns_type(
    db: Connection, unique_name: str, test_dsn: str, env: dict[str, str]
) -> None:
    """Tenant "042" of an integer column is tenant 42, whose rows the erasure must find."""
    create_table(db, unique_name, [(i, 42, old()) for i in range(1, 4)])
    asked = erase(test_dsn, env, unique_name, "--tenant", "042", "--reason", "t 1")
    assert asked.returncode == 0, asked.stderr
    assert f"3 row(s) of public.{unique_name} in it now" in asked.stdout
    erasure_id = int(asked.stdout.strip().splitlines()[-1])
    assert (
        count(
            db,
            "SELECT count(*) FROM retention.erasures WHERE erasure_id = %s AND value = '42'",
            erasure_id,
        )
        == 1
    )
    wrong = erase(test_dsn, env, unique_name, "--tenant", "x42", "--reason", "t 2")
    assert wrong.returncode == 2
    assert "is not a value of" in wrong.stderr
    assert erasures_of(db, unique_name) == 1


def test_explain_and_the_listing_show_how_many_passes_an_erasure_took(
    db: Connection, unique_name: str, test_dsn: str, env: dict[str, str]
) -> None:
    from retention.erasures.process import process_erasure
    from tests.support.policies import make_policy

    create_table(db, unique_name, [(i, 7, old()) for i in range(1, 4)])
    asked = erase(test_dsn, env, unique_name, "--tenant", "7", "--reason", "t 1")
    assert asked.returncode == 0, asked.stderr
    erasure_id = asked.stdout.strip().splitlines()[-1]
    before = cli("--dsn", test_dsn, "explain", "--erasure", erasure_id, env=env)
    assert "  passes: 0\n" in before.stdout
    process_erasure(db, make_policy(unique_name), int(erasure_id))
    shown = cli("--dsn", test_dsn, "explain", "--erasure", erasure_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "state: done" in shown.stdout
    assert "  passes: 1\n" in shown.stdout
    as_json = cli("--dsn", test_dsn, "explain", "--erasure", erasure_id, "--json", env=env)
    assert json.loads(as_json.stdout)["passes"] == 1
    listed = cli("--dsn", test_dsn, "erasures", "--policy", unique_name, env=env)
    assert listed.stdout.startswith(f"{erasure_id}  {unique_name}  tenant=7  done")
    assert "  passes: 1" in listed.stdout.splitlines()[0]
