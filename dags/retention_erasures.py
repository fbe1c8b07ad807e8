"""
### Work urgent erasures now, whatever the policies' schedules

Every minute (and at once when an erasure is requested through the plugin's API),
this DAG works each open erasure of `retention.erasures` (requested with
`python -m retention.cli erase`, `POST /retention/erasures`, or a signed hint with
`"priority": "urgent"`): every row and object of its scope, whatever its age,
through the policy's own row deleter or, for a remote policy, as urgent operations
of the operations ledger, which every worker claims ahead of the routine backlog
under the same rate limit. Holds win: held rows stay, the rest goes, and an
erasure whose every row left is held ends `blocked_by_hold`, naming the holds on
those rows (or the `hold_column`, or the remote side's hold). Each final state
writes a `retention.erased` event (policies with `notify:`). A routine run
holding a policy's run lease does not block it: their deletes are idempotent and
each row goes at most once.

**Why its own DAG** (not a run of `retention__<policy>` with a conf): a policy's runs
take turns at its run lease, so an erasure would wait behind a routine run for hours;
and its steps (cutoff, run lease, plan) are what an erasure must skip. The id has a
dash, which no policy name may contain, so no policy's DAG can ever take it.

**One pass at a time:** a pass works every open erasure and nothing claims one for a
pass, so two passes would work the same erasures side by side. A run triggered with a
logical date in the future never starts (Airflow waits for the date) and so stops every
pass until it is marked failed; the Retention view names it and the fix.

**Idempotent:** yes; an erasure's deletes are keyed as the scan's, and a finished
erasure is not worked again.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, task

from retention.airflow.steps import work_erasures_step
from retention.erasures.request import ERASURE_DAG_ID
from retention.policy import load_policies

PASS_BUDGET_SECONDS = 240.0  # the whole pass, shared by its erasures (the step stops at it)

_policies = list(load_policies().policies)

with DAG(
    dag_id=ERASURE_DAG_ID,
    schedule="* * * * *",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,  # one pass at a time: nothing claims an erasure for a pass
    is_paused_upon_creation=False,
    doc_md=__doc__,
    tags=["retention", "erasure"],
    default_args={
        "owner": "data-platform",
        "retries": 1,
        "retry_delay": dt.timedelta(seconds=10),
        "retry_exponential_backoff": True,
    },
):

    @task(multiple_outputs=False)
    def work_erasures() -> dict[str, Any]:
        return work_erasures_step(_policies, PASS_BUDGET_SECONDS)

    work_erasures()
