"""A policy that names a column its table lacks fails the run's first task at once (no
retry), naming the policy, the field, the column, a close match and the columns that exist;
the Retention view's check is the same one."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from retention.airflow.dag_factory import build_dag
from retention.db.connection import Connection
from retention.db.table_check import TableMismatch
from retention.ui.queries import table_check
from tests.support.policies import make_policy, remote_policy
from tests.support.tables import create_media_table, create_table, old


def test_a_misspelt_column_fails_the_first_task_without_a_retry(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(1, 1, old())])
    policy = make_policy(unique_name, timestamp_column="creatd_at")
    dag = build_dag(policy, auto_register=False)
    (first,) = [t for t in dag.tasks if not t.upstream_task_ids]
    assert first.task_id == "migrate_schema", "the first task is the one that checks"
    with pytest.raises(AirflowFailException) as failed:  # AirflowFailException: no retry
        first.python_callable()
    assert str(failed.value) == (
        f"policy {unique_name!r}, field 'timestamp_column': column 'creatd_at' does not exist "
        f"in public.{unique_name} (its columns: id, tenant_id, created_at, payload); "
        "did you mean 'created_at'?"
    )
    assert isinstance(failed.value.__cause__, TableMismatch)


def test_every_named_column_is_checked_and_every_problem_named(
    db: Connection, unique_name: str
) -> None:
    create_media_table(db, unique_name, 1)
    policy = remote_policy(unique_name, object_id_column="object_id", version_column="versoin")
    fit = table_check(db, policy)
    assert fit.exists
    assert [p.split(":")[0] for p in fit.problems] == [
        f"policy {unique_name!r}, field 'remote.object_id_column'",
        f"policy {unique_name!r}, field 'remote.version_column'",
    ]
    assert fit.problems[0].endswith("did you mean 'object_key'?")
    assert fit.problems[1].endswith("did you mean 'version'?")
    assert table_check(db, remote_policy(unique_name)).problems == []
