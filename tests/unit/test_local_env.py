"""A checkout's `.local/env` is read the way the shell reads it, and never overrides."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from retention.paths import load_local_env


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
