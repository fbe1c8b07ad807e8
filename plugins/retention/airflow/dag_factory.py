"""Build one DAG per policy: ``retention__<name>``. The DAG files only call this.

:func:`build_dag` is the list of a policy's tasks and their wiring. Each task
is a small function here that reads the run's context and calls its step
(``retention.airflow.steps``); ``@non_retryable`` names the errors that fail it
without a retry. The DAG's docs come from ``retention.airflow.dag_docs``, its
trigger form from ``retention.policy.params``.

Each DAG is built on its own: a policy whose ``DAG()`` call raises is left
out and reported, by name, through :func:`build_problems` (the error DAG
file's import error), while the other policies still load.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from typing import Any

from airflow.sdk import DAG, Param, PokeReturnValue, TriggerRule, XComArg, get_current_context, task
from airflow.sdk.configuration import conf

from retention.airflow.alerts import with_alerts
from retention.airflow.dag_docs import policy_doc
from retention.airflow.non_retryable import non_retryable
from retention.airflow.pools import pool_slots_now
from retention.airflow.steps import (
    DeliveryIncomplete,
    RunLeaseHeld,
    compute_cutoff_step,
    delete_window_step,
    deleter_for,
    deliver_events_step,
    drain_operations_step,
    drop_partitions_step,
    migrate_schema_step,
    plan_windows_step,
    purge_audit_step,
    reconcile_step,
    take_run_lease_step,
)
from retention.db.table_check import TableMismatch
from retention.evidence.reconcile import RetentionIncomplete, RunNotPlanned
from retention.objects.kind import CredentialFailure, EndpointSuspect
from retention.policy.loader import PolicyProblem, PolicySet
from retention.policy.model import Policy
from retention.policy.params import run_params, run_settings
from retention.rows.cutoff import CutoffError
from retention.runs.lease import STALE_WAITER_POKES, RunState

log = logging.getLogger(__name__)

RUN_LEASE_POKE_SECONDS = 10.0
"""How often a run waiting for the policy's run lease looks again (rescheduled, no slot held);
``$RETENTION_RUN_LEASE_POKE_SECONDS`` when the DAG is parsed overrides it."""
RUN_LEASE_WAIT_SECONDS = 24 * 3600.0
"""How long a run waits for the run lease before it fails (the sensor's timeout);
``$RETENTION_RUN_LEASE_WAIT_SECONDS`` overrides it."""
MAX_ACTIVE_RUNS = 16
"""Runs of one policy's DAG that may be running at once. The run lease, not this limit,
keeps them from overlapping (a backfill ignores it anyway), so it only needs to be large
enough that a run Airflow never starts (a logical date in the future, which the
scheduler leaves "running" with no task started until that date) cannot hold the policy:
with 1, every later run queued behind such a run for weeks."""


def build_dag(
    policy: Policy,
    warnings: list[str] | None = None,
    siblings: list[Policy] | None = None,
    also_named: set[str] | None = None,
    pool_slots: dict[str, int] | None = None,
    **dag_kwargs: Any,
) -> DAG:
    """Wire one policy's tasks; ``dag_kwargs`` go to ``DAG()`` (``auto_register`` for checks).

    ``siblings`` are all the policies of the file: the audit purge keeps their
    evidence and purges that of policies no longer there.  ``pool_slots`` (from
    ``airflow_settings.yaml``) stand in for the window pool's slots when a run
    cannot read them from Airflow's pools (see ``retention.airflow.pools``).
    """
    current = siblings or [policy]
    named = {p.name for p in current} | set(also_named or ())
    with DAG(
        schedule=policy.schedule, **dag_arguments(policy, warnings or []), **dag_kwargs
    ) as dag:
        cutoff = compute_cutoff_task(policy)
        migrate_schema_task(policy) >> cutoff
        cutoff >> purge_audit_task(policy, current, named)
        lease = run_lease_sensor(policy, cutoff)
        plan = plan_windows_task(policy, cutoff, (pool_slots or {}).get(window_pool(policy)))
        lease >> plan
        if policy.remote is None:  # remote rows each need their own API call
            lease >> drop_partitions_task(policy, cutoff) >> plan
        deletes = delete_window_tasks(policy, plan)
        if policy.remote is not None:
            plan >> drain_operations_task(policy) >> deletes
        if policy.notify is not None:
            # Reconcile runs after the delivery, so the events in its summary are final,
            # and it makes the run dirty when the delivery failed or never ran.
            deletes >> deliver_events_task(policy) >> reconcile_task(policy)
        else:
            deletes >> reconcile_task(policy)
    return with_alerts(dag, policy)  # alerts: send_alerts after reconcile, the deadline


def dag_arguments(policy: Policy, warnings: list[str]) -> dict[str, Any]:
    """``DAG()``'s other arguments for the policy: house rules, docs and trigger form."""
    return {
        "dag_id": policy.dag_id,
        "start_date": policy.start_date,
        "catchup": False,
        "max_active_runs": MAX_ACTIVE_RUNS,
        "doc_md": policy_doc(policy, warnings),
        "description": f"Delete {policy.table} rows older than {policy.retain_days} days",
        "tags": ["retention", policy.name, *policy.tags],
        "default_args": {
            "owner": policy.owner,
            "retries": 2,
            "retry_delay": dt.timedelta(seconds=30),
            "retry_exponential_backoff": True,
            "max_retry_delay": dt.timedelta(minutes=10),
        },
        "params": {name: Param(**spec) for name, spec in run_params(policy).items()},
    }


def window_pool(policy: Policy) -> str:
    """The pool of ``delete_window``: ``remote.pool`` when the windows call an API."""
    return policy.remote.pool if policy.remote else policy.pool


def fewest_windows(policy: Policy, slots: int | None) -> int:
    """Enough windows to keep every slot of the window pool busy (at least one)."""
    return max(1, (slots or 0) // policy.pool_slots)


def dag_run_state(context: Any, dag_id: str) -> RunState:
    """Airflow's answer to "what state is run X of this DAG in" (None: no such run)."""
    ti = context["ti"]

    def state(run_id: str) -> str | None:
        try:
            answer = ti.get_dagrun_state(dag_id=dag_id, run_id=run_id)
        except Exception:
            if ti.get_dr_count(dag_id=dag_id, run_ids=[run_id]) == 0:
                return None  # deleted: it holds nothing
            raise
        return str(getattr(answer, "value", answer))  # "success", not "DagRunState.SUCCESS"

    return state


LOOKING_SOON = frozenset({"scheduled", "queued", "running", "up_for_retry", "restarting"})
"""States of a ``take_run_lease`` task that has not looked for the lease yet, or is looking
(None, "No Status", too): its run joins the line for the lease within a poke."""


def earlier_run_coming(context: Any, dag_id: str) -> str | None:
    """The running run of this DAG with the latest earlier logical date, when its
    ``take_run_lease`` has not looked for the lease yet (Airflow's answer through the Task
    SDK); None when there is none, or it has looked (then it is in the line, or past it)."""
    ti = context["ti"]
    previous = ti.get_previous_dagrun(state="running")
    if previous is None:
        return None
    states = ti.get_task_states(
        dag_id=dag_id, run_ids=[previous.run_id], task_ids=["take_run_lease"]
    )
    state = (states.get(previous.run_id) or {}).get("take_run_lease")
    state = None if state is None else str(getattr(state, "value", state))
    return previous.run_id if state is None or state in LOOKING_SOON else None


def migrate_schema_task(policy: Policy) -> XComArg:
    """``migrate_schema``: the table checked against the policy (a misspelt column fails the
    run here, without a retry), then the ``retention`` schema's pending migrations."""

    @task(multiple_outputs=False)
    @non_retryable(TableMismatch)
    def migrate_schema() -> dict[str, Any]:
        return migrate_schema_step(policy.postgres_conn_id, policy)

    return migrate_schema()


def compute_cutoff_task(policy: Policy) -> XComArg:
    """``compute_cutoff``: the run's cutoff; one in the future fails the run at once."""

    @task(multiple_outputs=False)
    @non_retryable(CutoffError, prefix=f"policy {policy.name!r}: ")
    def compute_cutoff() -> dict[str, Any]:
        context = get_current_context()
        return compute_cutoff_step(
            policy.name,
            policy.retain_days,
            data_interval_end=context.get("data_interval_end"),
            logical_date=context.get("logical_date"),
            run_after=context["dag_run"].run_after,
        )

    return compute_cutoff()


def run_lease_poke_seconds() -> float:
    """The sensor's poke interval (``$RETENTION_RUN_LEASE_POKE_SECONDS`` at parse time)."""
    return float(os.environ.get("RETENTION_RUN_LEASE_POKE_SECONDS", RUN_LEASE_POKE_SECONDS))


def run_lease_sensor(policy: Policy, cutoff: XComArg) -> XComArg:
    """The ``take_run_lease`` task: waits, rescheduled, while another run of the policy runs
    or a waiting run with an earlier cutoff goes first."""
    poke_seconds = run_lease_poke_seconds()

    @task.sensor(
        poke_interval=poke_seconds,
        timeout=float(os.environ.get("RETENTION_RUN_LEASE_WAIT_SECONDS", RUN_LEASE_WAIT_SECONDS)),
        mode="reschedule",  # waits without holding a worker slot
    )
    def take_run_lease(cutoff: dict[str, Any]) -> PokeReturnValue:
        context = get_current_context()
        outcome = take_run_lease_step(
            policy,
            run_id=context["run_id"],
            run_state=dag_run_state(context, policy.dag_id),
            cutoff=cutoff,
            earlier=earlier_run_coming(context, policy.dag_id),
            stale_seconds=STALE_WAITER_POKES * poke_seconds,
        )
        return PokeReturnValue(is_done=outcome.taken, xcom_value=outcome.as_dict())

    return take_run_lease(cutoff)


def drop_partitions_task(policy: Policy, cutoff: XComArg) -> XComArg:
    """``drop_partitions`` of a row policy: partitions wholly older than the cutoff."""

    @task(multiple_outputs=False)
    @non_retryable(CutoffError, RunLeaseHeld, TableMismatch)  # a retry cannot help
    def drop_partitions(cutoff: dict[str, Any]) -> dict[str, Any]:
        context = get_current_context()
        return drop_partitions_step(
            policy,
            run_id=context["run_id"],
            cutoff=cutoff,
            settings=run_settings(policy, context["params"]),
            run_state=dag_run_state(context, policy.dag_id),
        )

    return drop_partitions(cutoff)


def plan_windows_task(policy: Policy, cutoff: XComArg, declared_slots: int | None) -> XComArg:
    """``plan_windows``: the run's immutable windows, recorded before any delete, at least
    as many as the window pool has slots now (``declared_slots``: the settings file's)."""

    @task
    @non_retryable(CutoffError, TableMismatch)
    def plan_windows(cutoff: dict[str, Any]) -> list[dict[str, Any]]:
        context = get_current_context()
        pool = pool_slots_now(window_pool(policy), declared_slots)
        log.info("policy %s: %s", policy.name, pool)
        return plan_windows_step(
            policy,
            run_id=context["run_id"],
            dag_run_moments=(context["dag_run"].run_after, context["dag_run"].start_date),
            cutoff=cutoff,
            settings=run_settings(policy, context["params"]),
            max_windows=conf.getint("core", "max_map_length"),
            min_windows=fewest_windows(policy, pool.slots),
        )

    return plan_windows(cutoff)


def delete_window_tasks(policy: Policy, plan: XComArg) -> XComArg:
    """``delete_window``, mapped over the plan: one task per window, named by its label."""
    deleter = deleter_for(policy)

    @task(
        multiple_outputs=False,
        pool=window_pool(policy),
        pool_slots=policy.pool_slots,
        map_index_template="{{ window_label }}",
    )
    @non_retryable(CredentialFailure, CutoffError, EndpointSuspect, RunLeaseHeld)
    def delete_window(window: dict[str, Any]) -> dict[str, Any]:
        context = get_current_context()
        settings = run_settings(policy, context["params"])
        # The grid shows this name: a dry run's windows say so at a glance.
        context["window_label"] = (  # type: ignore[typeddict-unknown-key]
            f"dry run · {window['label']}" if settings.dry_run else window["label"]
        )
        return delete_window_step(
            policy.postgres_conn_id,
            deleter,
            window=window,
            settings=settings,
            dag_id=policy.dag_id,
            run_state=dag_run_state(context, policy.dag_id),
            retain_days=policy.retain_days,
        )

    return delete_window.expand_kwargs(plan)


def drain_operations_task(policy: Policy) -> XComArg:
    """The ``drain_operations`` task of a remote policy: one pass over due operations."""
    assert policy.remote is not None

    @task(multiple_outputs=False, pool=policy.remote.pool, pool_slots=policy.pool_slots)
    @non_retryable(CredentialFailure, EndpointSuspect)  # a retry cannot fix either
    def drain_operations() -> dict[str, Any]:
        context = get_current_context()
        if run_settings(policy, context["params"]).dry_run:
            return {"skipped": "dry run: no remote call"}
        return drain_operations_step(policy, context["run_id"])

    return drain_operations()


def deliver_events_task(policy: Policy) -> XComArg:
    """The ``deliver_events`` task of a policy with ``notify:``."""
    assert policy.notify is not None

    @task(multiple_outputs=False, pool=policy.notify.pool, trigger_rule=TriggerRule.ALL_DONE)
    @non_retryable(DeliveryIncomplete)  # retrying cannot revive dead events
    def deliver_events() -> dict[str, Any]:
        context = get_current_context()
        dry_run = run_settings(policy, context["params"]).dry_run
        return deliver_events_step(policy, context["run_id"], dry_run=dry_run)

    return deliver_events()


def purge_audit_task(policy: Policy, current: list[Policy], named: set[str]) -> XComArg:
    """``purge_audit``: this policy's evidence older than ``audit_days``, in bounded batches."""

    @task(multiple_outputs=False)
    def purge_audit() -> dict[str, Any]:
        if run_settings(policy, get_current_context()["params"]).dry_run:
            return {"skipped": "dry run: nothing is purged"}
        return purge_audit_step(policy, current, named)

    return purge_audit()


def reconcile_task(policy: Policy) -> XComArg:
    """``reconcile``: what remains, the run's summary, and the run lease given back."""

    @task(multiple_outputs=False, trigger_rule=TriggerRule.ALL_DONE)
    @non_retryable(RetentionIncomplete, RunNotPlanned)  # a retry cannot help
    def reconcile() -> dict[str, Any]:
        return reconcile_step(policy, run_id=get_current_context()["run_id"])

    return reconcile()


def build_policy_dags(
    loaded: PolicySet, *, register: bool = True
) -> tuple[dict[str, DAG], list[PolicyProblem]]:
    """Build each good policy's DAG on its own; a ``DAG()`` that raises is a named problem.

    ``register=False`` builds without registering anything: the error DAG file
    uses it to report the same problems the policies DAG file skipped.
    """
    dags: dict[str, DAG] = {}
    problems: list[PolicyProblem] = []
    extra: dict[str, Any] = {} if register else {"auto_register": False}
    for policy in loaded.policies:
        try:
            dag = build_dag(
                policy,
                loaded.warnings.get(policy.name),
                loaded.policies,
                {problem.policy for problem in loaded.problems},
                pool_slots=loaded.pool_slots,
                **extra,
            )
            dag.validate()  # what the DagBag would reject later, reported with the policy
            dags[policy.dag_id] = dag
        except Exception as failed:  # reported by name; the other policies still load
            message = f"{type(failed).__name__}: {failed}"
            problems.append(
                PolicyProblem(
                    policy.name,
                    _field_named_in(message),
                    f"its DAG could not be built: {message}",
                )
            )
    return dags, problems


def _field_named_in(message: str) -> str:
    """The policy field an Airflow error message is about, as best it can be told."""
    words = set(message.lower().replace("'", " ").replace('"', " ").split())
    for name in Policy.model_fields:
        if name != "name" and (name in words or name.rstrip("s") in words):
            return name
    return "*"
