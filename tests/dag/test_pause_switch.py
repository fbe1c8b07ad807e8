"""The pause switch is wired to the Airflow Variable, read at run time and never at parse time."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from airflow.models.dagbag import DagBag
from airflow.sdk import Variable

from retention.airflow.steps import deleter_for, read_pause_switch
from retention.db.gate import PAUSE_VARIABLE
from retention.rows.windows import Window
from tests.support.env import ROOT
from tests.support.policies import make_policy, remote_policy


def test_the_switch_reads_the_retention_pause_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert PAUSE_VARIABLE == "retention_pause"
    monkeypatch.delenv("AIRFLOW_VAR_RETENTION_PAUSE", raising=False)
    assert read_pause_switch() is None
    monkeypatch.setenv("AIRFLOW_VAR_RETENTION_PAUSE", "event_logs, media_assets")
    assert read_pause_switch() == "event_logs, media_assets"


@pytest.mark.parametrize("policy", [make_policy("p"), remote_policy("r")])
def test_both_deleters_get_the_switch(policy: Any) -> None:
    deleter = deleter_for(policy)
    assert deleter.switch is read_pause_switch  # type: ignore[attr-defined]
    gate = deleter.gate_for(_window(policy.name))
    assert gate.switch is read_pause_switch
    assert gate.spec == policy.health


def test_parsing_the_dags_never_reads_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"Variable.get{args} at parse time")

    monkeypatch.setattr(Variable, "get", refuse)
    monkeypatch.delenv("RETENTION_POLICIES", raising=False)
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    assert "retention__event_logs" in bag.dags


def _window(policy: str) -> Any:

    return Window(
        policy, "r", "r@x", 0, "all", None, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), 1, 2, 2
    )
