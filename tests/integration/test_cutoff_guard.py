"""Nothing deletes with a cutoff later than now − retain_days, whoever computed it.

``compute_cutoff`` refuses a future anchor; the tasks after it check the cutoff they
are handed again (an XCom can be cleared, edited or left from an older release), before
they plan, drop or delete anything.
"""

from __future__ import annotations

import datetime as dt

import pytest

from devtools.seed import seed_event_logs
from retention.airflow.steps import delete_window_step, deleter_for, plan_windows_step
from retention.db.connection import Connection
from retention.policy.params import RunSettings
from retention.rows.cutoff import CutoffError
from tests.support.policies import make_policy
from tests.support.tables import count, plan

SETTINGS = RunSettings(dry_run=False, window_rows=None, batch_rows=100)


def _ahead(days: int) -> str:
    return (dt.datetime.now(dt.UTC) - dt.timedelta(days=30 - days)).isoformat()


def test_plan_windows_refuses_a_cutoff_later_than_now_minus_retain_days(
    db: Connection, unique_name: str
) -> None:
    seed_event_logs(db, table=f"public.{unique_name}", rows=300, end=dt.datetime.now(dt.UTC))
    policy = make_policy(unique_name)  # retain_days 30
    handed_on = {"cutoff": _ahead(20), "anchor_source": "logical_date", "logical_date": None}
    with pytest.raises(CutoffError, match=rf"^policy '{unique_name}', task plan_windows: cutoff"):
        plan_windows_step(
            policy,
            run_id="manual__future",
            dag_run_moments=(None, None),
            cutoff=handed_on,
            settings=SETTINGS,
            max_windows=16,
        )
    windows = "SELECT count(*) FROM retention.windows WHERE policy = %s"
    assert count(db, windows, unique_name) == 0


def test_a_window_handed_a_future_cutoff_deletes_nothing(db: Connection, unique_name: str) -> None:
    now = dt.datetime.now(dt.UTC)
    seed_event_logs(db, table=f"public.{unique_name}", rows=300, end=now)
    policy = make_policy(unique_name)
    window = plan(db, policy, cutoff=now - dt.timedelta(days=30))[0].to_xcom()
    window["cutoff"] = _ahead(20)  # an edited XCom: rows 10 days old would be "eligible"
    rows = f"SELECT count(*) FROM public.{unique_name}"  # noqa: S608
    before = count(db, rows)
    with pytest.raises(CutoffError, match="is later than now − retain_days"):
        delete_window_step(
            policy.postgres_conn_id,
            deleter_for(policy),
            window=window,
            settings=SETTINGS,
            dag_id=policy.dag_id,
            run_state=lambda run_id: "running",
            retain_days=policy.retain_days,
        )
    assert count(db, rows) == before
