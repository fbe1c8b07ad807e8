"""An error a retry cannot mend fails its task at once (``AirflowFailException``: no retry,
the message kept); any other error is left to the task's retries."""

from __future__ import annotations

import datetime as dt
import inspect
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from retention.airflow import dag_factory
from retention.airflow.dag_factory import build_dag
from retention.airflow.steps import DeliveryIncomplete, RunLeaseHeld
from retention.db.table_check import TableMismatch
from retention.evidence.reconcile import RetentionIncomplete, RunNotPlanned
from retention.objects.kind import CredentialFailure, EndpointSuspect
from retention.policy import load_policies
from retention.policy.model import Policy
from retention.rows.cutoff import CutoffError

WINDOW = {"window": {"label": "ids 1–2"}}
CUTOFF = {"cutoff": {"cutoff": "2026-01-01T00:00:00+00:00"}}
# policy, task, the step it calls, its arguments, an error no retry can mend, the message prefix
FINAL = [
    (
        "event_logs",
        "compute_cutoff",
        "compute_cutoff_step",
        {},
        CutoffError,
        "policy 'event_logs': ",
    ),
    ("event_logs", "migrate_schema", "migrate_schema_step", {}, TableMismatch, ""),
    ("media_assets", "migrate_schema", "migrate_schema_step", {}, TableMismatch, ""),
    ("event_logs", "plan_windows", "plan_windows_step", CUTOFF, CutoffError, ""),
    ("event_logs", "plan_windows", "plan_windows_step", CUTOFF, TableMismatch, ""),
    ("event_logs", "drop_partitions", "drop_partitions_step", CUTOFF, TableMismatch, ""),
    ("event_logs", "drop_partitions", "drop_partitions_step", CUTOFF, CutoffError, ""),
    ("event_logs", "drop_partitions", "drop_partitions_step", CUTOFF, RunLeaseHeld, ""),
    ("event_logs", "delete_window", "delete_window_step", WINDOW, RunLeaseHeld, ""),
    ("event_logs", "delete_window", "delete_window_step", WINDOW, CutoffError, ""),
    ("media_assets", "delete_window", "delete_window_step", WINDOW, CredentialFailure, ""),
    ("media_assets", "delete_window", "delete_window_step", WINDOW, EndpointSuspect, ""),
    ("media_assets", "drain_operations", "drain_operations_step", {}, CredentialFailure, ""),
    ("media_assets", "drain_operations", "drain_operations_step", {}, EndpointSuspect, ""),
    ("media_assets", "deliver_events", "deliver_events_step", {}, DeliveryIncomplete, ""),
    ("event_logs", "reconcile", "reconcile_step", {}, RetentionIncomplete, ""),
    ("event_logs", "reconcile", "reconcile_step", {}, RunNotPlanned, ""),
]


def shipped(name: str) -> Policy:
    return next(policy for policy in load_policies().policies if policy.name == name)


@pytest.fixture
def context(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    now = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
    context: dict[str, Any] = {
        "run_id": "manual__1",
        "params": {},
        "ti": None,
        "dag_run": SimpleNamespace(run_after=now, start_date=now),
        "data_interval_end": now,
        "logical_date": now,
    }
    monkeypatch.setattr(dag_factory, "get_current_context", lambda: context)
    return context


def refusing(error: Exception) -> Any:
    def step(*args: Any, **kwargs: Any) -> Any:
        raise error

    return step


@pytest.mark.parametrize(("policy", "task_id", "step", "kwargs", "kind", "prefix"), FINAL)
@pytest.mark.usefixtures("context")
def test_an_error_no_retry_can_mend_fails_the_task_at_once(
    monkeypatch: pytest.MonkeyPatch,
    policy: str,
    task_id: str,
    step: str,
    kwargs: dict[str, Any],
    kind: type[Exception],
    prefix: str,
) -> None:
    dag = build_dag(shipped(policy), auto_register=False)
    error = kind(f"{task_id} cannot go on: the fix is named here")
    monkeypatch.setattr(dag_factory, step, refusing(error))
    with pytest.raises(AirflowFailException) as failed:
        dag.get_task(task_id).python_callable(**kwargs)
    assert str(failed.value) == f"{prefix}{error}"
    assert failed.value.__cause__ is error


@pytest.mark.usefixtures("context")
def test_any_other_error_is_left_to_the_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    dag = build_dag(shipped("event_logs"), auto_register=False)
    lost = ConnectionError("server closed the connection unexpectedly")
    monkeypatch.setattr(dag_factory, "delete_window_step", refusing(lost))
    with pytest.raises(ConnectionError) as failed:
        dag.get_task("delete_window").python_callable(**WINDOW)
    assert failed.value is lost


def test_a_task_keeps_its_function_name_and_signature() -> None:
    """Airflow takes the task id from the function's name and binds ``expand_kwargs`` and
    upstream XComs by its parameters: the decorator must not hide either."""
    dag = build_dag(shipped("event_logs"), auto_register=False)
    for task_id, parameters in {
        "compute_cutoff": [],
        "plan_windows": ["cutoff"],
        "drop_partitions": ["cutoff"],
        "delete_window": ["window"],
        "reconcile": [],
    }.items():
        function = dag.get_task(task_id).python_callable
        assert function.__name__ == task_id
        assert list(inspect.signature(function).parameters) == parameters
