"""Build one DAG per policy: ``retention__<name>``. The DAG files only call this.

Each DAG is built on its own: a policy whose ``DAG()`` call raises is left
out and reported, by name, through :func:`build_problems` (the error DAG
file's import error), while the other policies still load.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import DAG, Param, PokeReturnValue, TriggerRule, get_current_context, task
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowFailException

from retention.airflow.alerts import alerts_doc, with_alerts
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
from retention.evidence.reconcile import RetentionIncomplete, RunNotPlanned
from retention.objects.operations import CredentialFailure, EndpointSuspect
from retention.policy.loader import PolicyProblem, PolicySet
from retention.policy.model import BATCH_ROWS_BOUNDS, WINDOW_ROWS_BOUNDS, Policy
from retention.policy.params import run_settings
from retention.rows.run_lease import RunState

DAG_DOC = """
### Retention policy DAG

Enforces one retention policy from `include/retention_policies.yaml` on a Postgres table.

0. `migrate_schema`: applies pending migrations of the `retention` schema, under an
   advisory lock (concurrent DAGs wait for each other).
1. `compute_cutoff`: `cutoff = anchor − retain_days`; the anchor is `data_interval_end`,
   else `logical_date`, else `run_after`, so reruns and backfills of a date delete the
   same rows. A cutoff in the future is refused.
2. `take_run_lease`: runs of one policy never overlap, whatever started them (a
   backfill, a manual run, a cleared task). While another run holds the policy's run
   lease this task waits, rescheduled every minute without a worker slot; a run whose
   DAG run ended without `reconcile` is taken over, and the windows it left `running`
   are closed as `cancelled`. `reconcile` gives the lease back.
3. `drop_partitions` (row policies): when the table is range-partitioned on the
   timestamp column, partitions wholly older than the cutoff are detached
   (`CONCURRENTLY` when there is no default partition) and dropped, or only detached
   with `partitions: detach_only`; evidence in `retention.partition_drops`. Otherwise
   it does nothing. Like a window, it works only while its run holds the run lease.
   A partition that a view, a foreign key or a publication depends on, or that holds
   rows at a DST gap newer than the cutoff, is left to the windows (the result says
   why); a detached table that cannot be dropped is recorded and named by `reconcile`,
   and the windows still run.
4. `plan_windows`: finds the eligible key range with a few index probes (never a walk
   of the rows) and cuts it into immutable windows, recorded in `retention.windows`.
   Each window carries about `target_window_seconds` of work at the rate earlier
   windows measured (or `window_rows` rows when set); `expected_rows` is the
   statistics' estimate, and the delete still filters on the timestamp. Without an
   index on the timestamp column, windows cover the whole key range (the run's
   `plan_notes` say so).
5. `delete_window`: one mapped task per window; deletes in batches, each its own short
   transaction with `lock_timeout` and `statement_timeout`, sized to take about
   `target_batch_ms`; a timed-out batch is split and retried, never skipped.
   Marking the run or the task failed stops it gracefully: the batch or call in flight
   finishes, nothing new starts, unstarted leases are released, the window ends
   `cancelled` and the run gets a partial summary (status `cancelled` once no window
   of it still runs).
6. `reconcile`: closes windows whose task died without closing them, counts rows still
   older than the cutoff, writes `retention.runs`, returns the summary, fails if any
   remain (or a partition that was to be dropped is detached but not dropped, or its
   drop was abandoned), and gives the run lease back.

Policies with a `remote:` section delete each row's object through the rate-limited
API first, through the `retention.operations` ledger: `drain_operations` works
pending operations of earlier runs whose `not_before` has passed, then each window
enqueues its operations and works one bounded pass (what is snoozed or backing off
is left for the next drain). `reconcile` accepts rows explained by a pending or dead
operation (backlog) unless they are older than `max_lag_hours`. With a `notify:`
section, `deliver_events` sends the signed `retention.deleted` events that the
deletions wrote to the outbox.

`purge_audit` deletes this policy's ledger, attempt, window and event rows once
they are older than `audit_days` (default 400), in bounded batches.

**Idempotent:** yes. Windows are recorded once per run; rerunning any task deletes nothing twice.
**Params:** `dry_run` (plan and count, delete nothing, call nothing), `window_rows` and
`batch_rows` overrides.
"""


RUN_LEASE_POKE_SECONDS = 60.0
"""How often a run waiting for the policy's run lease looks again (rescheduled, no slot held);
``$RETENTION_RUN_LEASE_POKE_SECONDS`` when the DAG is parsed overrides it."""
RUN_LEASE_WAIT_SECONDS = 24 * 3600.0
"""How long a run waits for the run lease before it fails (the sensor's timeout);
``$RETENTION_RUN_LEASE_WAIT_SECONDS`` overrides it."""


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


def run_lease_sensor(policy: Policy) -> Any:
    """The ``take_run_lease`` task: waits, rescheduled, while another run of the policy runs."""

    @task.sensor(
        poke_interval=float(
            os.environ.get("RETENTION_RUN_LEASE_POKE_SECONDS", RUN_LEASE_POKE_SECONDS)
        ),
        timeout=float(os.environ.get("RETENTION_RUN_LEASE_WAIT_SECONDS", RUN_LEASE_WAIT_SECONDS)),
        mode="reschedule",  # waits without holding a worker slot
    )
    def take_run_lease() -> PokeReturnValue:
        context = get_current_context()
        outcome = take_run_lease_step(
            policy, run_id=context["run_id"], run_state=dag_run_state(context, policy.dag_id)
        )
        return PokeReturnValue(is_done=outcome.taken, xcom_value=outcome.as_dict())

    return take_run_lease()


def drain_operations_task(policy: Policy) -> Any:
    """The ``drain_operations`` task of a remote policy: one pass over due operations."""
    assert policy.remote is not None

    @task(multiple_outputs=False, pool=policy.remote.pool, pool_slots=policy.pool_slots)
    def drain_operations() -> dict[str, Any]:
        if run_settings(policy, get_current_context()["params"]).dry_run:
            return {"skipped": "dry run: no remote call"}
        try:
            return drain_operations_step(policy, get_current_context()["run_id"])
        except (CredentialFailure, EndpointSuspect) as refused:  # a retry cannot fix it
            raise AirflowFailException(str(refused)) from refused

    return drain_operations()


def deliver_events_task(policy: Policy) -> Any:
    """The ``deliver_events`` task of a policy with ``notify:``."""
    assert policy.notify is not None

    @task(multiple_outputs=False, pool=policy.notify.pool, trigger_rule=TriggerRule.ALL_DONE)
    def deliver_events() -> dict[str, Any]:
        context = get_current_context()
        dry_run = run_settings(policy, context["params"]).dry_run
        try:
            return deliver_events_step(policy, context["run_id"], dry_run=dry_run)
        except DeliveryIncomplete as incomplete:  # retrying cannot revive dead events
            raise AirflowFailException(str(incomplete)) from incomplete

    return deliver_events()


def policy_doc(policy: Policy, warnings: list[str]) -> str:
    """The DAG docs: the shared description, the policy's settings, its pools, its warnings."""
    tenant = f"`{policy.tenant_column}`" if policy.tenant_column else "none"
    rows = [
        f"| table | `{policy.table}` (key `{policy.key_column}`, "
        f"timestamp `{policy.timestamp_column}`, tenant {tenant}) |",
        f"| retain_days | {policy.retain_days} |",
        f"| connection | `{policy.postgres_conn_id}` |",
        "| window size | "
        + (
            f"{policy.window_rows} rows (window_rows)"
            if policy.window_rows
            else f"about {policy.target_window_seconds:g} s of work (target_window_seconds)"
        )
        + " |",
        f"| batches | start at {policy.batch_rows} rows, sized to {policy.target_batch_ms:g} ms "
        f"within [{policy.min_batch_rows}, {policy.max_batch_rows}] |",
        f"| owner | {policy.owner} |",
    ]
    if policy.max_lag_hours is not None:
        rows.append(f"| max_lag_hours | {policy.max_lag_hours:g} (reconcile fails past it) |")
    if policy.remote is None:
        rows.append(f"| pool | `{policy.pool}` × {policy.pool_slots} slot(s) per window |")
    else:
        remote = policy.remote
        version = f"`{remote.version_column}`" if remote.version_column else "the row's timestamp"
        not_found = (
            f"confirms the deletion (after a 2xx; breaker at {remote.not_found_breaker})"
            if remote.not_found_is_deleted
            else "is a rejection (dead for review)"
        )
        rows += [
            f"| pool | `{remote.pool}` (remote.pool) × {policy.pool_slots} slot(s): "
            "`delete_window` and `drain_operations` |",
            f"| remote | `{remote.method} {remote.endpoint}` on connection "
            f"`{remote.http_conn_id}`, object id `{remote.object_id_column}`, version {version} |",
            f"| rate limit | {remote.rate_per_second:g}/s, burst {remote.burst}, "
            f"scope `{remote.scope}` (back to full rate {remote.recovery_seconds:g} s "
            "after a 429) |",
            f"| calls | claim batch {remote.claim_batch}, max attempts {remote.max_attempts}, "
            f"lease {remote.lease:g} s, request timeout {remote.request_timeout_seconds:g} s, "
            f"task budget {remote.task_budget_seconds:g} s |",
            f"| retries | backoff {remote.backoff_base_seconds:g} s up to "
            f"{remote.backoff_max_seconds:g} s; `{remote.idempotency_header}` header on every "
            f"attempt; {remote.auth_failure_limit} refusals (401/403) in a row stop the task |",
            f"| 404 | {not_found} |",
        ]
    if policy.notify is not None:
        notify = policy.notify
        rows.append(
            f"| notify | `POST {notify.endpoint}` on `{notify.http_conn_id}`, "
            f"`deliver_events` in pool `{notify.pool}`; max attempts {notify.max_attempts}, "
            f"timeout {notify.timeout_seconds:g} s, lease {notify.lease:g} s |"
        )
    if policy.alerts is not None:
        rows.append(f"| alerts | {alerts_doc(policy.alerts)} |")
    pools = (
        "**Pools.** `delete_window` runs in the policy's `pool`; its slots cap how many "
        "windows delete at once, across every policy sharing it."
        if policy.remote is None
        else "**Pools.** A remote policy's windows call the API, so `delete_window` and "
        "`drain_operations` run in `remote.pool`, whose slots cap concurrent callers across "
        "every policy sharing it; the request rate is capped separately by the limiter "
        "scope. The policy's `pool` field is not used."
    )
    warned = "".join(f"\n\n> **Warning:** {w}" for w in warnings)
    return (
        f"{DAG_DOC}\n#### Policy `{policy.name}`\n\n{policy.description}\n\n"
        "| field | value |\n|---|---|\n" + "\n".join(rows) + f"\n\n{pools}{warned}\n"
    )


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
    ``airflow_settings.yaml``) sets the fewest windows a plan makes, so that a
    large enough run keeps every slot of the window pool busy.
    """
    current = siblings or [policy]
    named = {p.name for p in current} | set(also_named or ())
    deleter = deleter_for(policy)
    window_pool = policy.remote.pool if policy.remote else policy.pool
    min_windows = max(1, (pool_slots or {}).get(window_pool, 0) // policy.pool_slots)
    with DAG(
        dag_id=policy.dag_id,
        schedule=policy.schedule,
        start_date=policy.start_date,
        catchup=False,
        max_active_runs=1,
        doc_md=policy_doc(policy, warnings or []),
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
                description="Eligible rows per window (an estimate); empty: sized to "
                f"about {policy.target_window_seconds:g} s of work each"
                + (f" (policy: {policy.window_rows})." if policy.window_rows else "."),
            ),
            "batch_rows": Param(
                None,
                type=["null", "integer"],
                minimum=BATCH_ROWS_BOUNDS[0],
                maximum=BATCH_ROWS_BOUNDS[1],
                description="Rows in the first delete transaction of each window; later ones "
                f"are sized to {policy.target_batch_ms:g} ms (policy: {policy.batch_rows}).",
            ),
        },
        **dag_kwargs,
    ) as dag:

        @task(multiple_outputs=False)
        def migrate_schema() -> dict[str, Any]:
            return migrate_schema_step(policy.postgres_conn_id)

        @task(multiple_outputs=False)
        def compute_cutoff() -> dict[str, Any]:
            context = get_current_context()
            return compute_cutoff_step(
                policy.name,
                policy.retain_days,
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
                min_windows=min_windows,
            )

        @task(
            multiple_outputs=False,
            pool=window_pool,
            pool_slots=policy.pool_slots,
            map_index_template="{{ window_label }}",
        )
        def delete_window(window: dict[str, Any]) -> dict[str, Any]:
            context = get_current_context()
            settings = run_settings(policy, context["params"])
            # The grid shows this name: a dry run's windows say so at a glance.
            context["window_label"] = (  # type: ignore[typeddict-unknown-key]
                f"dry run · {window['label']}" if settings.dry_run else window["label"]
            )
            try:
                return delete_window_step(
                    policy.postgres_conn_id,
                    deleter,
                    window=window,
                    settings=settings,
                    dag_id=policy.dag_id,
                    run_state=dag_run_state(context, policy.dag_id),
                )
            except (CredentialFailure, EndpointSuspect, RunLeaseHeld) as refused:
                raise AirflowFailException(str(refused)) from refused

        @task(multiple_outputs=False)
        def purge_audit() -> dict[str, Any]:
            if run_settings(policy, get_current_context()["params"]).dry_run:
                return {"skipped": "dry run: nothing is purged"}
            return purge_audit_step(policy, current, named)

        @task(multiple_outputs=False, trigger_rule=TriggerRule.ALL_DONE)
        def reconcile() -> dict[str, Any]:
            try:
                return reconcile_step(policy, run_id=get_current_context()["run_id"])
            except (RetentionIncomplete, RunNotPlanned) as dirty:  # a retry cannot help
                raise AirflowFailException(str(dirty)) from dirty

        @task(multiple_outputs=False)
        def drop_partitions(cutoff: dict[str, Any]) -> dict[str, Any]:
            context = get_current_context()
            try:
                return drop_partitions_step(
                    policy,
                    run_id=context["run_id"],
                    cutoff=cutoff,
                    settings=run_settings(policy, context["params"]),
                    run_state=dag_run_state(context, policy.dag_id),
                )
            except RunLeaseHeld as refused:  # a retry cannot help while that run works
                raise AirflowFailException(str(refused)) from refused

        cutoff = compute_cutoff()
        migrate_schema() >> cutoff
        cutoff >> purge_audit()
        lease = run_lease_sensor(policy)
        cutoff >> lease
        plan = plan_windows(cutoff)
        lease >> plan
        if policy.remote is None:  # remote rows each need their own API call
            lease >> drop_partitions(cutoff) >> plan
        deletes = delete_window.expand_kwargs(plan)
        if policy.remote is not None:
            plan >> drain_operations_task(policy) >> deletes
        if policy.notify is not None:
            # Reconcile runs after the delivery, so the events in its summary are final,
            # and it makes the run dirty when the delivery failed or never ran.
            deletes >> deliver_events_task(policy) >> reconcile()
        else:
            deletes >> reconcile()
    return with_alerts(dag, policy)  # alerts: send_alerts after reconcile, the deadline


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
