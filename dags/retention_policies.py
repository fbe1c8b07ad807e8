"""
### Retention policy DAG

Enforces one retention policy from `include/retention_policies.yaml` on a Postgres table.

1. `compute_cutoff`: `cutoff = anchor − retain_days`; the anchor is `data_interval_end`,
   else `logical_date`, else `run_after`, so reruns and backfills of a date delete the
   same rows. A cutoff in the future is refused.
2. `plan_windows`: migrates the `retention` schema, then walks the key index into
   immutable windows of about `window_rows` eligible rows (per tenant), recorded in
   `retention.windows`.
3. `delete_window`: one mapped task per window, in the policy's pool; deletes in
   sub-batches of `batch_rows`, each its own short transaction with `lock_timeout` and
   `statement_timeout`; a timed-out batch is split and retried, never skipped.
4. `reconcile`: counts rows still older than the cutoff, writes `retention.runs`,
   returns the summary, and fails if any remain.

Policies with a `remote:` section add `drain_operations` (pending operations of
earlier runs whose `not_before` has passed) before the windows, and each window
deletes its objects through the rate-limited API and the `retention.operations`
ledger before deleting the rows; `reconcile` then accepts rows explained by a
pending or dead operation (backlog) unless they are older than `max_lag_hours`.
With a `notify:` section, `deliver_events` sends the signed `retention.deleted`
events that the deletions wrote to the outbox.

`purge_audit` deletes this policy's ledger, attempt, window and event rows once
they are older than `audit_days` (default 400), in bounded batches.

**Idempotent:** yes. Windows are recorded once per run; rerunning any task deletes nothing twice.
**Params:** `dry_run` (plan and count, delete nothing), `window_rows` and `batch_rows` overrides.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, Param, TriggerRule, get_current_context, task
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowFailException

from retention.policy import Policy, load_policies
from retention.reconcile import RetentionIncomplete
from retention.steps import (
    BATCH_ROWS_BOUNDS,
    WINDOW_ROWS_BOUNDS,
    compute_cutoff_step,
    delete_window_step,
    deliver_events_step,
    drain_operations_step,
    plan_windows_step,
    purge_audit_step,
    reconcile_step,
    run_settings,
)


def policy_doc(policy: Policy) -> str:
    tenant = f"`{policy.tenant_column}`" if policy.tenant_column else "none"
    return (
        f"{__doc__}\n#### Policy `{policy.name}`\n\n{policy.description}\n\n"
        f"| field | value |\n|---|---|\n"
        f"| table | `{policy.table}` (key `{policy.key_column}`, "
        f"timestamp `{policy.timestamp_column}`, tenant {tenant}) |\n"
        f"| retain_days | {policy.retain_days} |\n"
        f"| connection | `{policy.postgres_conn_id}` |\n"
        f"| pool | `{policy.pool}` |\n"
        f"| window_rows / batch_rows | {policy.window_rows} / {policy.batch_rows} |\n"
        f"| owner | {policy.owner} |\n"
    )


def build_dag(policy: Policy) -> DAG:
    """Wire the four tasks of one policy's DAG."""
    with DAG(
        dag_id=policy.dag_id,
        schedule=policy.schedule,
        start_date=policy.start_date,
        catchup=False,
        max_active_runs=1,
        doc_md=policy_doc(policy),
        description=f"Delete {policy.table} rows older than {policy.retain_days} days",
        tags=["retention", policy.name, *policy.tags],
        default_args={
            "owner": policy.owner,
            "retries": 2,
            "retry_delay": dt.timedelta(seconds=30),
            "retry_exponential_backoff": True,
            "max_retry_delay": dt.timedelta(minutes=10),
        },
        params={
            "dry_run": Param(
                False, type="boolean", description="Plan and count every window; delete nothing."
            ),
            "window_rows": Param(
                None,
                type=["null", "integer"],
                minimum=WINDOW_ROWS_BOUNDS[0],
                maximum=WINDOW_ROWS_BOUNDS[1],
                description=f"Eligible rows per window (policy: {policy.window_rows}).",
            ),
            "batch_rows": Param(
                None,
                type=["null", "integer"],
                minimum=BATCH_ROWS_BOUNDS[0],
                maximum=BATCH_ROWS_BOUNDS[1],
                description=f"Rows per delete transaction (policy: {policy.batch_rows}).",
            ),
        },
    ) as dag:

        @task
        def compute_cutoff() -> dict[str, Any]:
            context = get_current_context()
            return compute_cutoff_step(
                policy,
                data_interval_end=context.get("data_interval_end"),
                logical_date=context.get("logical_date"),
                run_after=context["dag_run"].run_after,
            )

        @task
        def plan_windows(cutoff: dict[str, Any]) -> list[dict[str, Any]]:
            context = get_current_context()
            return plan_windows_step(
                policy,
                run_id=context["run_id"],
                dag_run_moments=(context["dag_run"].run_after, context["dag_run"].start_date),
                cutoff=cutoff,
                settings=run_settings(policy, context["params"]),
                max_windows=conf.getint("core", "max_map_length"),
            )

        @task(
            pool=policy.remote.pool if policy.remote else policy.pool,
            pool_slots=policy.pool_slots,
            map_index_template="{{ window_label }}",
        )
        def delete_window(window: dict[str, Any]) -> dict[str, Any]:
            context = get_current_context()
            context["window_label"] = window["label"]  # type: ignore[typeddict-unknown-key]
            return delete_window_step(
                policy, window=window, settings=run_settings(policy, context["params"])
            )

        @task
        def purge_audit() -> dict[str, Any]:
            if run_settings(policy, get_current_context()["params"]).dry_run:
                return {"skipped": "dry run: nothing is purged"}
            return purge_audit_step(policy)

        @task(trigger_rule=TriggerRule.ALL_DONE)
        def reconcile() -> dict[str, Any]:
            try:
                return reconcile_step(policy, run_id=get_current_context()["run_id"])
            except RetentionIncomplete as dirty:  # retrying cannot clean the table
                raise AirflowFailException(str(dirty)) from dirty

        cutoff = compute_cutoff()
        cutoff >> purge_audit()
        plan = plan_windows(cutoff)
        deletes = delete_window.expand_kwargs(plan)
        if policy.remote is not None:

            @task(pool=policy.remote.pool)
            def drain_operations() -> dict[str, Any]:
                if run_settings(policy, get_current_context()["params"]).dry_run:
                    return {"skipped": "dry run: no remote call"}
                return drain_operations_step(policy)

            plan >> drain_operations() >> deletes
        if policy.notify is not None:

            @task(trigger_rule=TriggerRule.ALL_DONE)
            def deliver_events() -> dict[str, Any]:
                return deliver_events_step(policy)

            # A leaf of its own: a failed delivery fails the run instead of hiding
            # behind reconcile's result.
            deletes >> deliver_events()
        deletes >> reconcile()
    return dag


for _policy in load_policies().policies:
    globals()[_policy.dag_id] = build_dag(_policy)
