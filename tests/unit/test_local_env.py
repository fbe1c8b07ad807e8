"""A checkout's `.local/env` is read the way the shell reads it, and never overrides."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
from pathlib import Path
from types import ModuleType

import pytest

from retention.paths import load_local_env
from tests.support.env import ROOT


def test_values_are_unquoted_and_variables_already_set_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = tmp_path / "env"
    conn = '{"conn_type": "postgres", "host": "127.0.0.1", "schema": "a b"}'
    env.write_text(
        f"RETENTION_T_CONN={shlex.quote(conn)}\nRETENTION_T_SET=from-file\nRETENTION_T_EMPTY=\n"
    )
    monkeypatch.delenv("RETENTION_T_CONN", raising=False)
    monkeypatch.delenv("RETENTION_T_EMPTY", raising=False)
    monkeypatch.setenv("RETENTION_T_SET", "from-operator")
    assert load_local_env(env) is True
    assert os.environ["RETENTION_T_CONN"] == conn
    assert os.environ["RETENTION_T_SET"] == "from-operator"
    assert os.environ["RETENTION_T_EMPTY"] == ""


def test_no_file_is_not_an_error(tmp_path: Path) -> None:
    assert load_local_env(tmp_path / "missing") is False


def test_a_blank_value_is_empty_and_an_unquoted_phrase_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = tmp_path / "env"
    env.write_text("RETENTION_T_BLANK=   \nRETENTION_T_WORDS=two words\n")
    monkeypatch.delenv("RETENTION_T_BLANK", raising=False)
    monkeypatch.delenv("RETENTION_T_WORDS", raising=False)
    with pytest.raises(ValueError, match=r"env:2: RETENTION_T_WORDS's value is 2 words"):
        load_local_env(env)
    assert os.environ["RETENTION_T_BLANK"] == ""
    assert "RETENTION_T_WORDS" not in os.environ, "nothing half-read is exported"


def load_devenv() -> ModuleType:
    spec = importlib.util.spec_from_file_location("devenv", ROOT / "scripts" / "devenv.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_env_gives_the_local_airflow_a_pool_reader_whose_password_it_knows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``plan_windows`` reads pool slots through ``retention_airflow_api``: under
    ``make airflow`` that connection names a viewer whose password the simple auth
    manager keeps (it only generates the missing ones), and users set by hand stay."""
    devenv = load_devenv()
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ops:op")
    monkeypatch.setenv("AIRFLOW__API__PORT", "8090")
    (tmp_path / "simple_auth_manager_passwords.json.generated").write_text('{"admin": "a"}\n')
    env = devenv.pool_reader(tmp_path)
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == (
        "admin:admin,ops:op,retention_pools:viewer"
    )
    conn = json.loads(env["AIRFLOW_CONN_RETENTION_AIRFLOW_API"])
    saved = json.loads((tmp_path / "simple_auth_manager_passwords.json.generated").read_text())
    assert saved["admin"] == "a", "the admin's password is kept"
    assert (conn["login"], conn["password"], conn["port"]) == (
        "retention_pools",
        saved["retention_pools"],
        8090,
    )
    assert devenv.pool_reader(tmp_path) == env, "a second `make env` changes nothing"
