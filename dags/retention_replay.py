"""
### Replay dead remote operations or dead events

Manual DAG. With `kind: operations` (default) it moves chosen dead operations of
one policy in `retention.operations` back to `pending` (attempts reset, due now);
the next run of the policy's DAG (its `drain_operations` step) then calls the
API again with the same operation keys. With `kind: events` it does the same for
exhausted `retention.deleted` events in `retention.outbox` (by `event_ids`, or
all dead since `since`), delivered again by the next run. Every replay writes
an audit row to `retention.replays`.

Choose operations by `operation_keys`, or by `failure_class` (for example
`http_422`, `http_403`, `max_attempts`), optionally only those dead `since` a
time. Replaying every dead operation at once is refused. List dead operations
with `python -m retention.cli dead-letters` or the `retention.dead_operations` view.

**Who may replay:** the user who triggered the run must be allowed by Airflow's
auth manager to trigger the policy's own DAG, `retention__<policy>`, too. The
api-server's replay guard answers 403 to a trigger that lacks it (every auth
manager); the first task checks again where it can look the user up (the
simple auth manager, or `RETENTION_REPLAY_USER_LOOKUP`) and fails, naming the
policy and the missing right. Where it cannot, a manual run with a user was
checked by the guard and may replay. A run no user triggered is refused;
`airflow dags test` (user `dag_test`) may replay.

Several replays may run at once (up to 16): each moves only operations that are still
dead, so an operation two replays name is moved, and audited, once. A run triggered
with a logical date in the future never starts (Airflow waits for the date); the
Retention view's dead-letters page names it and the fix.

**Idempotent:** yes; replaying an operation that is no longer dead changes nothing.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, Param, get_current_context, task

from retention.airflow.connections import postgres
from retention.airflow.rights import require_replay_right
from retention.airflow.steps import migrate_schema_step
from retention.evidence.replay import replay_dead, replay_dead_events
from retention.policy import Policy, load_policies

REPLAY_MAX_ACTIVE_RUNS = 16
"""Replay runs that may run at once: enough that one run Airflow never starts (a logical
date in the future) holds up none of the others; replays of the same operations take
turns on their row locks (see below)."""

_remote_policies = {p.name: p for p in load_policies().policies if p.remote is not None}


def _chosen(params: dict[str, Any]) -> Policy:
    policy = _remote_policies.get(params["policy"])
    if policy is None:
        raise ValueError(
            f"param 'policy': {params['policy']!r} is not a policy with a remote section; "
            f"choose one of {sorted(_remote_policies)}"
        )
    return policy


def _authorized() -> Policy:
    """The chosen policy, once the user who triggered the run may trigger its DAG."""
    context = get_current_context()
    policy = _chosen(context["params"])
    run = context["dag_run"]
    require_replay_right(policy.name, run.triggering_user_name, run.run_type)
    return policy


with DAG(
    dag_id="retention__replay",
    schedule=None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    # Replays may run side by side: each is one statement that locks the operations still
    # dead in key order, then moves them (queue_replay.sql), so of two replays naming the
    # same operation the second waits for the first's row lock, finds it pending and
    # leaves it, and two replays cannot deadlock; migrate_schema takes an advisory lock.
    # One run Airflow never starts (a logical date in the future) then holds one slot,
    # not every later replay.
    max_active_runs=REPLAY_MAX_ACTIVE_RUNS,
    # it runs only when triggered (from the Retention view too): created paused, a run
    # started there would stay queued for ever
    is_paused_upon_creation=False,
    doc_md=__doc__,
    tags=["retention", "replay"],
    default_args={
        "owner": "data-platform",
        "retries": 1,
        "retry_delay": dt.timedelta(seconds=30),
        "retry_exponential_backoff": True,
    },
    params={
        "kind": Param("operations", type="string", enum=["operations", "events"]),
        "policy": Param(
            next(iter(_remote_policies), ""),
            type="string",
            enum=sorted(_remote_policies) or [""],
            description="Policy whose dead operations to replay.",
        ),
        "operation_keys": Param(
            [], type="array", items={"type": "string"}, description="Exact operation keys."
        ),
        "failure_class": Param(
            None, type=["null", "string"], description="e.g. http_422, http_403, max_attempts"
        ),
        "since": Param(
            None,
            type=["null", "string"],
            format="date-time",
            description="Only operations that went dead at or after this time.",
        ),
        "event_ids": Param(
            [], type="array", items={"type": "string"}, description="kind events: event ids."
        ),
        "reason": Param(None, type=["null", "string"], description="Why (kept in the audit)."),
    },
):

    @task(multiple_outputs=False)
    def migrate_schema() -> dict[str, Any]:
        return migrate_schema_step(_authorized().postgres_conn_id)

    @task(multiple_outputs=False)
    def replay() -> dict[str, Any]:
        policy = _authorized()
        context = get_current_context()
        params = context["params"]
        since = dt.datetime.fromisoformat(params["since"]) if params.get("since") else None
        requested_by = f"{context['run_id']} by {context['dag_run'].triggering_user_name}"
        with postgres(policy.postgres_conn_id) as conn:
            if params.get("kind") == "events":
                return replay_dead_events(
                    conn,
                    policy=policy.name,
                    event_ids=params.get("event_ids") or None,
                    since=since,
                    requested_by=requested_by,
                    reason=params.get("reason"),
                )
            return replay_dead(
                conn,
                policy=policy.name,
                operation_keys=params.get("operation_keys") or None,
                failure_class=params.get("failure_class"),
                since=since,
                requested_by=requested_by,
                reason=params.get("reason"),
            )

    migrate_schema() >> replay()
