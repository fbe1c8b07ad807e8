"""DAG validation tier: the shipped DAG files import cleanly and follow the house rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from airflow.models.dagbag import DagBag

from retention.airflow.dag_factory import MAX_ACTIVE_RUNS
from tests.support.env import ROOT
from tests.support.policies import policy_fields

DAGS = ROOT / "dags"


def write_policies(tmp_path: Path, policies: dict) -> Path:
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({"policies": policies}))
    return path


def dag_bag(policies: Path | None, monkeypatch: pytest.MonkeyPatch) -> DagBag:
    if policies is not None:
        monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    return DagBag(dag_folder=str(DAGS))


@pytest.fixture
def shipped(monkeypatch: pytest.MonkeyPatch) -> DagBag:
    monkeypatch.delenv("RETENTION_POLICIES", raising=False)
    return dag_bag(None, monkeypatch)


def test_shipped_dags_import_without_errors(shipped: DagBag) -> None:
    assert shipped.import_errors == {}
    assert "retention__event_logs" in shipped.dags


def test_every_dag_follows_the_house_rules(shipped: DagBag) -> None:
    assert shipped.dags
    for dag_id, dag in shipped.dags.items():
        assert dag_id.startswith("retention__")
        # A policy's runs take turns through the run lease; several may be running, so
        # that one Airflow never starts (a logical date in the future) holds nothing up.
        # The replay DAG runs one at a time.
        expected = 1 if dag_id == "retention__replay" else MAX_ACTIVE_RUNS
        assert dag.max_active_runs == expected, dag_id
        assert dag.catchup is False, dag_id
        assert "Idempotent" in (dag.doc_md or ""), dag_id
        assert "retention" in dag.tags, dag_id
        for task in dag.tasks:
            assert task.retries >= 1, (dag_id, task.task_id)
            assert task.retry_exponential_backoff, (dag_id, task.task_id)
            assert task.owner not in ("", "airflow"), (dag_id, task.task_id)


def test_policy_dags_have_their_steps_and_params(shipped: DagBag) -> None:
    policy_dags = {k: v for k, v in shipped.dags.items() if k != "retention__replay"}
    assert set(policy_dags) == {"retention__event_logs", "retention__media_assets"}
    for dag_id, dag in policy_dags.items():
        assert set(dag.params.keys()) >= {"dry_run", "window_rows", "batch_rows"}, dag_id
        extra = {
            "migrate_schema",
            "drain_operations",
            "deliver_events",
            "purge_audit",
            "drop_partitions",
        }
        steps = [t.task_id for t in dag.tasks if t.task_id not in extra]
        assert steps == [
            "compute_cutoff",
            "take_run_lease",
            "plan_windows",
            "delete_window",
            "reconcile",
        ]
    for dag in policy_dags.values():
        assert dag.get_task("purge_audit").upstream_task_ids == {"compute_cutoff"}
        migrate = dag.get_task("migrate_schema")
        assert migrate.upstream_task_ids == set(), "migrations run first"
        assert migrate.downstream_task_ids == {"compute_cutoff"}
        assert dag.get_task("compute_cutoff").upstream_task_ids == {"migrate_schema"}
    for dag in policy_dags.values():  # nothing deletes before the run holds the run lease
        lease = dag.get_task("take_run_lease")
        assert lease.upstream_task_ids == {"compute_cutoff"}
        assert lease.mode == "reschedule", "a waiting run holds no worker slot"
        assert "take_run_lease" in dag.get_task("plan_windows").upstream_task_ids
    rows = policy_dags["retention__event_logs"]
    assert rows.get_task("drop_partitions").upstream_task_ids == {
        "compute_cutoff",
        "take_run_lease",
    }
    assert rows.get_task("drop_partitions").downstream_task_ids == {"plan_windows"}
    media = policy_dags["retention__media_assets"]
    assert "drop_partitions" not in media.task_ids, "remote rows each need their own call"
    assert media.get_task("drain_operations").pool == "media_api"
    assert media.get_task("delete_window").partial_kwargs["pool"] == "media_api"
    assert media.get_task("drain_operations").downstream_task_ids == {"delete_window"}
    assert media.get_task("deliver_events").pool == "default_pool"
    assert media.get_task("deliver_events").upstream_task_ids == {"delete_window"}


def test_replay_dag_is_manual_and_names_the_remote_policies(shipped: DagBag) -> None:
    replay = shipped.dags["retention__replay"]
    assert replay.schedule is None
    assert replay.params.get_param("policy").schema["enum"] == ["media_assets"]


def test_delete_window_is_mapped_in_the_policy_pool(shipped: DagBag) -> None:
    dag = shipped.dags["retention__event_logs"]
    delete = dag.get_task("delete_window")
    assert delete.partial_kwargs["pool"] == "retention_db"
    assert delete.partial_kwargs["map_index_template"] == "{{ window_label }}"
    assert dag.get_task("reconcile").trigger_rule == "all_done"


def test_params_are_validated(shipped: DagBag) -> None:
    params = shipped.dags["retention__event_logs"].params
    params.validate()
    schema = params.get_param("window_rows").schema
    assert schema["minimum"] >= 1
    assert schema["maximum"] <= 10_000_000


def test_bad_policy_is_an_import_error_that_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_policies(
        tmp_path,
        {
            "fine": policy_fields("fine"),
            "broken": policy_fields("broken", batch_rows=5000, window_rows=100),
        },
    )
    bag = dag_bag(path, monkeypatch)
    assert sorted(bag.dags) == ["retention__fine", "retention__replay"]
    (error,) = bag.import_errors.values()
    assert "policy 'broken', field 'batch_rows'" in error
    assert "larger than window_rows" in error


def test_unreadable_policy_file_is_an_import_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text("policies:\n  a: [unclosed")
    bag = dag_bag(path, monkeypatch)
    assert list(bag.dags) == ["retention__replay"]
    (error,) = bag.import_errors.values()
    assert "not valid YAML" in error


def test_remote_policy_docs_state_its_pool_rules(shipped: DagBag) -> None:
    media = shipped.dags["retention__media_assets"]
    assert "`media_api` (remote.pool)" in media.doc_md
    assert "The policy's `pool` field is not used" in media.doc_md
    assert "DELETE /v1/tenants/{tenant_id}/assets/{object_id}" in media.doc_md
    events = shipped.dags["retention__event_logs"]
    assert "`retention_db` × 1 slot(s) per window" in events.doc_md


def test_a_policy_whose_dag_cannot_be_built_is_named_and_the_others_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever DAG() rejects that the model did not see stays with its own policy."""
    from retention.airflow import dag_factory

    real_build = dag_factory.build_dag

    def build_or_fail(policy, warnings=None, siblings=None, also_named=None, **kwargs):
        if policy.name == "odd":
            raise ValueError("schedule '0 0 30 2 *' never fires")
        return real_build(policy, warnings, siblings, also_named, **kwargs)

    monkeypatch.setattr(dag_factory, "build_dag", build_or_fail)
    path = write_policies(
        tmp_path,
        {
            "fine": policy_fields("fine"),
            "odd": policy_fields("odd"),
            "also_fine": policy_fields("also_fine", tags=["x" * 100]),
        },
    )
    bag = dag_bag(path, monkeypatch)
    assert sorted(bag.dags) == ["retention__also_fine", "retention__fine", "retention__replay"]
    (error,) = bag.import_errors.values()
    assert "policy 'odd', field 'schedule': its DAG could not be built" in error


def test_a_101_character_tag_is_named_and_leaves_the_other_policies_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_policies(
        tmp_path,
        {
            "fine": policy_fields("fine"),
            "long_tag": policy_fields("long_tag", tags=["x" * 101]),
        },
    )
    bag = dag_bag(path, monkeypatch)
    assert sorted(bag.dags) == ["retention__fine", "retention__replay"]
    (error,) = bag.import_errors.values()
    assert "policy 'long_tag', field 'tags'" in error
