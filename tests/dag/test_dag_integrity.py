"""DAG validation tier: the shipped DAG files import cleanly and follow the house rules."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml
from airflow.models.dagbag import DagBag
from airflow.sdk import DAG

from retention.airflow.dag_factory import MAX_ACTIVE_RUNS
from retention.erasures.request import ERASURE_DAG_ID
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
        # A policy's runs take turns through the run lease, and replays through their
        # rows' locks; several may be running, so that one Airflow never starts (a logical
        # date in the future) holds nothing up. The erasure DAG runs one pass at a time
        # (nothing claims an erasure for a pass): the Retention view names such a run.
        expected = 1 if dag_id == "retention__erasure-requests" else MAX_ACTIVE_RUNS
        assert dag.max_active_runs == expected, dag_id
        assert dag.catchup is False, dag_id
        assert "Idempotent" in (dag.doc_md or ""), dag_id
        assert "retention" in dag.tags, dag_id
        for task in dag.tasks:
            assert task.retries >= 1, (dag_id, task.task_id)
            assert task.retry_exponential_backoff, (dag_id, task.task_id)
            assert task.owner not in ("", "airflow"), (dag_id, task.task_id)


@pytest.fixture
def policy_dags(shipped: DagBag) -> dict[str, DAG]:
    """The shipped policies' DAGs (not ``retention__replay``), by DAG id."""
    return {
        k: v
        for k, v in shipped.dags.items()
        if k not in ("retention__replay", "retention__erasure-requests")
    }


def upstream(dag: DAG, task_id: str) -> set[str]:
    """Every task ``task_id`` waits for, directly or not."""
    return dag.get_task(task_id).get_flat_relative_ids(upstream=True)


def downstream(dag: DAG, task_id: str) -> set[str]:
    """Every task that waits for ``task_id``, directly or not."""
    return dag.get_task(task_id).get_flat_relative_ids(upstream=False)


# The policy DAG's steps in the order they run; the others depend on the policy's sections.
CORE_STEPS = ["compute_cutoff", "take_run_lease", "plan_windows", "delete_window", "reconcile"]
OPTIONAL_STEPS = {
    "migrate_schema",
    "drain_operations",
    "deliver_events",
    "purge_audit",
    "drop_partitions",
}
# What may run before the run holds the policy's run lease: none of it touches the table.
BEFORE_THE_LEASE = {"migrate_schema", "compute_cutoff", "take_run_lease", "purge_audit"}


def test_the_shipped_policies_are_the_policy_dags(policy_dags: dict[str, DAG]) -> None:
    assert set(policy_dags) == {"retention__event_logs", "retention__media_assets"}


def test_a_run_can_be_dry_and_can_override_its_sizes(policy_dags: dict[str, DAG]) -> None:
    for dag_id, dag in policy_dags.items():
        assert set(dag.params.keys()) >= {"dry_run", "window_rows", "batch_rows"}, dag_id


def test_the_core_steps_run_in_order(policy_dags: dict[str, DAG]) -> None:
    for dag_id, dag in policy_dags.items():
        assert set(dag.task_ids) - OPTIONAL_STEPS == set(CORE_STEPS), dag_id
        for earlier, later in itertools.pairwise(CORE_STEPS):
            assert earlier in upstream(dag, later), f"{dag_id}: {later} before {earlier}"


def test_migrations_run_before_anything_else(policy_dags: dict[str, DAG]) -> None:
    for dag_id, dag in policy_dags.items():
        migrate = dag.get_task("migrate_schema")
        assert migrate.upstream_task_ids == set(), "migrations run first"
        assert migrate.downstream_task_ids == {"compute_cutoff"}, dag_id
        assert dag.get_task("compute_cutoff").upstream_task_ids == {"migrate_schema"}, dag_id
        assert downstream(dag, "migrate_schema") == set(dag.task_ids) - {"migrate_schema"}


def test_the_run_lease_is_asked_for_once_the_cutoff_is_known_and_waits_for_nothing_else(
    policy_dags: dict[str, DAG],
) -> None:
    """A run whose cutoff is refused never takes the lease; the audit purge never delays it."""
    for dag_id, dag in policy_dags.items():
        assert dag.get_task("take_run_lease").upstream_task_ids == {"compute_cutoff"}, dag_id


def test_nothing_touches_the_table_before_the_run_lease_is_taken(
    policy_dags: dict[str, DAG],
) -> None:
    for dag_id, dag in policy_dags.items():
        under_the_lease = set(dag.task_ids) - BEFORE_THE_LEASE
        assert under_the_lease <= downstream(dag, "take_run_lease"), dag_id


def test_a_run_waiting_for_the_lease_holds_no_worker_slot(policy_dags: dict[str, DAG]) -> None:
    for dag in policy_dags.values():
        assert dag.get_task("take_run_lease").mode == "reschedule"


def test_a_run_waiting_for_the_lease_looks_again_every_10_seconds_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The docs promise 10 s (a backfill's waiting runs move up within one poke of the
    lease coming free); ``$RETENTION_RUN_LEASE_POKE_SECONDS`` unset, as in a deployment."""
    monkeypatch.delenv("RETENTION_RUN_LEASE_POKE_SECONDS", raising=False)
    monkeypatch.delenv("RETENTION_POLICIES", raising=False)
    parsed = dag_bag(None, monkeypatch)
    policy_ids = [d for d in parsed.dags if d not in ("retention__replay", ERASURE_DAG_ID)]
    assert policy_ids
    for dag_id in policy_ids:
        sensor = parsed.dags[dag_id].get_task("take_run_lease")
        assert sensor.poke_interval == 10, dag_id


def test_the_run_lease_is_given_back_last(policy_dags: dict[str, DAG]) -> None:
    """``reconcile`` gives the lease back: whatever runs under it has ended by then."""
    for dag_id, dag in policy_dags.items():
        after_reconcile = downstream(dag, "reconcile") | {"reconcile"}
        under_the_lease = downstream(dag, "take_run_lease") - after_reconcile
        assert under_the_lease <= upstream(dag, "reconcile"), dag_id


def test_reconcile_runs_after_every_delete_even_failed_ones(policy_dags: dict[str, DAG]) -> None:
    """Every task from ``delete_window`` to ``reconcile`` runs when its upstream failed."""
    for dag_id, dag in policy_dags.items():
        assert "delete_window" in upstream(dag, "reconcile"), dag_id
        between = downstream(dag, "delete_window") & upstream(dag, "reconcile")
        for task_id in between | {"reconcile"}:
            assert dag.get_task(task_id).trigger_rule == "all_done", (dag_id, task_id)


def test_the_audit_purge_neither_waits_for_the_lease_nor_holds_up_a_delete(
    policy_dags: dict[str, DAG],
) -> None:
    for dag_id, dag in policy_dags.items():
        purge = dag.get_task("purge_audit")
        assert purge.upstream_task_ids == {"compute_cutoff"}, dag_id
        assert purge.downstream_task_ids == set(), dag_id


def test_partitions_are_dropped_under_the_lease_before_the_plan(
    policy_dags: dict[str, DAG],
) -> None:
    rows = policy_dags["retention__event_logs"]
    drop = rows.get_task("drop_partitions")
    assert drop.upstream_task_ids == {"compute_cutoff", "take_run_lease"}
    assert drop.downstream_task_ids == {"plan_windows"}


def test_a_remote_policy_drops_no_partitions(policy_dags: dict[str, DAG]) -> None:
    media = policy_dags["retention__media_assets"]
    assert "drop_partitions" not in media.task_ids, "remote rows each need their own call"


def test_every_remote_call_runs_in_the_remote_pool(policy_dags: dict[str, DAG]) -> None:
    media = policy_dags["retention__media_assets"]
    assert media.get_task("drain_operations").pool == "media_api"
    assert media.get_task("delete_window").partial_kwargs["pool"] == "media_api"


def test_a_remote_run_drains_earlier_operations_between_its_plan_and_its_windows(
    policy_dags: dict[str, DAG],
) -> None:
    media = policy_dags["retention__media_assets"]
    assert media.get_task("drain_operations").upstream_task_ids == {"plan_windows"}
    assert media.get_task("drain_operations").downstream_task_ids == {"delete_window"}


def test_events_are_delivered_after_every_delete_outside_the_remote_pool(
    policy_dags: dict[str, DAG],
) -> None:
    media = policy_dags["retention__media_assets"]
    assert media.get_task("deliver_events").pool == "default_pool"
    assert media.get_task("deliver_events").upstream_task_ids == {"delete_window"}


def test_replay_dag_is_manual_and_names_the_remote_policies(shipped: DagBag) -> None:
    replay = shipped.dags["retention__replay"]
    assert replay.schedule is None
    # created paused (Airflow's default), a run triggered from the Retention view stays queued
    assert replay.is_paused_upon_creation is False
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
    assert sorted(bag.dags) == [
        "retention__erasure-requests",
        "retention__fine",
        "retention__replay",
    ]
    (error,) = bag.import_errors.values()
    assert "policy 'broken', field 'batch_rows'" in error
    assert "larger than window_rows" in error


def test_unreadable_policy_file_is_an_import_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text("policies:\n  a: [unclosed")
    bag = dag_bag(path, monkeypatch)
    assert sorted(bag.dags) == ["retention__erasure-requests", "retention__replay"]
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
    assert sorted(bag.dags) == [
        "retention__also_fine",
        "retention__erasure-requests",
        "retention__fine",
        "retention__replay",
    ]
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
    assert sorted(bag.dags) == [
        "retention__erasure-requests",
        "retention__fine",
        "retention__replay",
    ]
    (error,) = bag.import_errors.values()
    assert "policy 'long_tag', field 'tags'" in error
