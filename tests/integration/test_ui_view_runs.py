"""The Retention view's runs and its replay DAG's paused flag, as pages (issue 18):
a replay is never started into a paused ``retention__replay`` (the page says so and
offers to unpause it to users who may edit that DAG); a card shows the latest run by
logical date in the state it is in, the last finished and the last dry run apart,
short run ids linked to their Airflow run, and a dirty run's next steps; a broken
policies file does not read as a permissions problem.

Airflow's answers come from the stand-in of ``tests/support/ui_access.py``, in the
``pages`` fixture of ``test_ui_pages.py``.
"""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest

from retention.airflow.access import REPLAY_DAG_ID
from retention.alerts.messages import RUNBOOK
from retention.db.connection import Connection
from tests.integration import test_ui_pages
from tests.integration.test_ui_pages import ORIGIN, Pages

pages = test_ui_pages.pages  # the fixture: a policy's seeded ledger, users, the stand-in

REPLAY = "/retention/ui/dead-letters/replay"
UNPAUSE = "/retention/ui/replay-dag/unpause"


def replay_ticked(pages: Pages, token: str = "admin-token") -> object:
    return pages.as_user(token).post(
        REPLAY, data={"scope": "selected", "operation_key": pages.seeded.dead_keys}, headers=ORIGIN
    )


def test_a_paused_replay_dag_starts_no_run_and_offers_to_unpause_it(pages: Pages) -> None:
    pages.access.paused[REPLAY_DAG_ID] = True
    client = pages.as_user("admin-token")
    page = client.get("/retention/ui/dead-letters")
    assert 'data-figure="replay_paused"' in page.text
    assert "is paused, so a replay started here would stay queued" in unescape(page.text)
    assert 'data-action="unpause-replay"' in page.text
    refused = replay_ticked(pages)
    assert refused.status_code == 409
    assert "no run was started" in unescape(refused.text)
    assert 'data-action="unpause-replay"' in refused.text, "the button is where the user is"
    assert pages.access.triggered == []
    unpaused = client.post(UNPAUSE, headers=ORIGIN)
    assert unpaused.status_code == 303, unpaused.text
    assert unpaused.headers["location"] == f"/retention/ui/dead-letters?unpaused={REPLAY_DAG_ID}"
    assert pages.access.unpaused == [(REPLAY_DAG_ID, "alice")]
    shown = client.get(unpaused.headers["location"])
    assert "data-unpaused" in shown.text
    assert 'data-figure="replay_paused"' not in shown.text
    assert replay_ticked(pages).status_code == 303
    assert len(pages.access.triggered) == 1


def test_unpausing_the_replay_dag_needs_the_right_to_edit_it(pages: Pages) -> None:
    pages.access.paused[REPLAY_DAG_ID] = True
    pages.access.uneditable_dags.add(REPLAY_DAG_ID)
    client = pages.as_user("admin-token")
    page = client.get("/retention/ui/dead-letters")
    assert "ask someone who may edit that DAG" in page.text
    assert 'data-action="unpause-replay"' not in page.text
    refused = replay_ticked(pages)
    assert refused.status_code == 409
    assert 'data-action="unpause-replay"' not in refused.text
    forbidden = client.post(UNPAUSE, headers=ORIGIN)
    assert forbidden.status_code == 403
    assert f"You may not unpause the DAG {REPLAY_DAG_ID!r}" in unescape(forbidden.text)
    viewer = pages.as_user("viewer-token").post(UNPAUSE, headers=ORIGIN)
    assert viewer.status_code == 403
    pages.access.uneditable_dags.clear()
    forged = pages.as_user("admin-token").post(UNPAUSE, headers={"Origin": "http://evil.example"})
    assert forged.status_code == 403
    assert pages.access.unpaused == []
    assert pages.access.paused[REPLAY_DAG_ID] is True


def add_run(
    db: Connection, policy: str, run_id: str, *, logical: str, status: str, finished: str | None
) -> None:
    """A run of ``policy`` like its seeded ``run-1``, with its own id, dates and status."""
    db.execute(
        "INSERT INTO retention.runs (policy, run_id, plan_id, dag_id, table_name, logical_date, "
        "anchor_source, cutoff, dry_run, status, window_rows, batch_rows, planned_at, finished_at) "
        "SELECT policy, %(run)s, %(run)s, dag_id, table_name, now() + %(logical)s::interval, "
        "anchor_source, cutoff, %(dry)s, %(status)s, window_rows, batch_rows, now(), "
        "now() + %(finished)s::interval "
        "FROM retention.runs WHERE policy = %(policy)s AND run_id = 'run-1'",
        {
            "run": run_id,
            "logical": logical,
            "dry": status == "dry_run",
            "status": status,
            "finished": finished,
            "policy": policy,
        },
    )


def card_of(text: str, policy: str) -> str:
    card = text[text.index(f'data-policy="{policy}"') :]
    return card[: card.index("</section>")]


def figure_tag(card: str, name: str) -> str:
    (tag,) = re.findall(rf'<[^>]*data-figure="{name}"[^>]*>[^<]*<', card)
    return unescape(tag)


def test_a_card_shows_the_latest_run_by_logical_date_as_it_runs(
    pages: Pages, db: Connection
) -> None:
    policy = pages.seeded.policy
    running = "scheduled__2026-12-01T00:00:00+00:00"
    backfill = "backfill__2020-01-01T00:00:00+00:00"
    add_run(db, policy.name, running, logical="1 hour", status="planned", finished=None)
    add_run(db, policy.name, backfill, logical="-6 years", status="clean", finished="1 minute")
    add_run(db, policy.name, "manual__dry", logical="2 hours", status="dry_run", finished="2 min")
    pages.access.states[(policy.dag_id, running)] = "running"
    card = card_of(pages.as_user("viewer-token").get("/retention/ui/").text, policy.name)
    status = figure_tag(card, "status")
    assert 'class="status status-running"' in status
    assert status.endswith(">running<")
    link = figure_tag(card, "run_id")
    assert f'title="{running}"' in link
    assert ">scheduled__2026-12-01…<" in link, "shortened to fit the card"
    assert (
        f'href="../../dags/{policy.dag_id}/runs/scheduled__2026-12-01T00%3A00%3A00%2B00%3A00"'
        in link
    )
    assert 'target="_top"' in link
    # the backfill finished last: beside the current state, not instead of it
    assert f'title="{backfill}"' in figure_tag(card, "last_finished_run_id")
    assert figure_tag(card, "last_finished_status").endswith(">clean<")
    # the dry run is apart, never the last run
    assert figure_tag(card, "dry_run").endswith(">dry_run<")
    assert 'title="manual__dry"' in figure_tag(card, "dry_run_id")
    assert 'data-figure="next_step"' not in card
    # stopped before reconcile: Airflow says failed
    pages.access.states[(policy.dag_id, running)] = "failed"
    card = card_of(pages.as_user("viewer-token").get("/retention/ui/").text, policy.name)
    assert figure_tag(card, "status").endswith(">failed<")


def test_a_dirty_card_links_its_next_steps(pages: Pages, db: Connection) -> None:
    policy = pages.seeded.policy
    add_run(db, policy.name, "manual__dirty", logical="1 hour", status="dirty", finished="1 min")
    card = card_of(pages.as_user("viewer-token").get("/retention/ui/").text, policy.name)
    (steps,) = re.findall(r'data-figure="next_step">(.*?)</div>', card, flags=re.DOTALL)
    assert f'href="/retention/ui/dead-letters?policy={policy.name}"' in steps
    assert f'href="../../dags/{policy.dag_id}/runs/manual__dirty/tasks/reconcile"' in steps
    assert "docs/runbook.md" in steps
    # dead letters are what keeps it dirty: the runbook step is theirs, not the lock hunt's
    assert RUNBOOK["dead_letters"].heading in steps
    assert RUNBOOK["dirty"].heading not in steps
    dead = pages.as_user("viewer-token").get(f"/retention/ui/dead-letters?policy={policy.name}")
    assert all(key in dead.text for key in pages.seeded.dead_keys), "the link lists them"
    # once every one is reviewed and discarded, the link leads to them as such, and the
    # next step is the dirty run's own (no dead letter awaits review)
    db.execute(
        "INSERT INTO retention.discards (operation_key, policy, discarded_by, note, dead_since) "
        "SELECT operation_key, policy, 'ops', 'reviewed', dead_since "
        "FROM retention.dead_operations WHERE policy = %s",
        (policy.name,),
    )
    card = card_of(pages.as_user("viewer-token").get("/retention/ui/").text, policy.name)
    (steps,) = re.findall(r'data-figure="next_step">(.*?)</div>', card, flags=re.DOTALL)
    listed = f"/retention/ui/dead-letters?policy={policy.name}&amp;discarded=1"
    assert f'href="{listed}"' in steps
    assert f"its {len(pages.seeded.dead_keys)} dead letters, reviewed and discarded" in steps
    assert "awaiting review" not in steps
    assert RUNBOOK["dirty"].heading in steps


def test_a_broken_policies_file_is_not_told_as_a_permissions_problem(
    pages: Pages, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policies = tmp_path / "not-yaml.yaml"
    policies.write_text("policies:\n  ledger: {retain_days: [\n")
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    for restricted in (False, True):  # may read every DAG (sees the error), or not
        if restricted:
            pages.access.unreadable_dags.add("retention__other")
        shown = unescape(pages.as_user("viewer-token").get("/retention/ui/").text)
        assert "No policy whose DAG you may read" not in shown
        assert "No policy is shown: the policies file has the problems above" in shown
        problems = shown.index('data-figure="policy_problems"')
        assert problems < shown.index('data-figure="no_policy"'), "the file's problems first"
