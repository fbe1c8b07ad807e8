"""The Retention view in headless Chromium, on a real api-server with the real plugin.

An admin and a viewer (the simple auth manager's users) log in through
Airflow's own login page, open the "Retention" entry of the UI's menu, and
read the view. The figures shown are compared with the database; the viewer
does not see the replay action (and is refused when posting it anyway), the
admin does, and the action starts a ``retention__replay`` run with the chosen
operation keys. ``retention__replay`` is created unpaused; paused, the view starts
no run and offers the admin (not the viewer) to unpause it. A third policy's card
shows its latest run by logical date as Airflow has it (running), the backfill that
finished last and a dry run apart, and links the run to its page in Airflow's UI.
On the same server, the overview's notes and next steps come last: a dirty card's
(its dead-letters link followed in the view's frame), a run dated in the future, a
run whose cutoff an earlier run had covered, a policy added to the file with a
misspelt column and child column, and the policies file broken.
Screenshots are kept under ``.local/screenshots/``; the
screenshot of docs/retention-view.md, ``docs/retention-view.png``, is the admin's
overview taken here.

Chromium is Debian's package (``.ci/run`` installs it in CI); without it the
test skips and says so. Nothing is downloaded.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from psycopg import sql

from devtools.airflow_services import (
    api_server,
    serialize_replay_dag,
    service_environment,
    tail,
)
from devtools.plans import CUTOFF
from retention.alerts.messages import RUNBOOK, RUNBOOK_PAGE
from retention.db.connection import Connection
from retention.db.table_check import table_fit
from retention.evidence.reconcile import reconcile_run
from retention.policy import Policy, load_policies, parse_policy
from retention.rows.children import coupled_tables
from retention.rows.deleter import delete_window
from retention.summary import covered_note
from tests.support.env import ROOT
from tests.support.policies import policy_fields, remote_fields
from tests.support.tables import create_table, new, old, plan
from tests.support.ui_seed import NOTIFY, RECENT_429S, SeededLedger, seed_remote_ledger

pytestmark = pytest.mark.scheduler

SCREENSHOTS = ROOT / ".local" / "screenshots"
ADMIN, VIEWER = "ops_admin", "ops_viewer"
REMOTE_POLICY, ROWS_POLICY, ORDERS_POLICY = "ui_media_assets", "ui_event_logs", "ui_orders"
TYPO_POLICY = "ui_misspelt"  # added to the policies file late: its table check
TIMEOUT_MS = 60_000  # per browser step: the machine is shared, the first page load is slow


@pytest.fixture
def chromium() -> str:
    """Debian's Chromium, or a skip that says how to get it (before any server starts)."""
    found = shutil.which("chromium")
    if found is None:
        pytest.skip(
            "no `chromium` on PATH: install Debian's package (`apt-get install chromium`; "
            ".ci/run does) to run the Retention view's browser test"
        )
    return found


@dataclass
class Served:
    url: str
    passwords: dict[str, str]
    seeded: SeededLedger
    logs: Path
    policies: Path  # RETENTION_POLICIES: read by the view at each request


def remote_policy_fields(table: str) -> dict[str, Any]:
    return policy_fields(
        table,
        window_rows=10_000,
        batch_rows=500,
        window_per_tenant=False,
        remote=remote_fields(table),
        notify=NOTIFY,
    )


def parsed(name: str, fields: dict[str, Any]) -> Policy:
    policy, problems = parse_policy(name, fields)
    assert policy is not None, problems
    return policy


@pytest.fixture
def served(
    chromium: str, db: Connection, test_dsn: str, unique_name: str, sandbox, tmp_path: Path
) -> Iterator[Served]:
    """An api-server with the plugin, two seeded policies (remote, rows), an admin and a viewer.

    The policies have readable names (they are in the docs' screenshot) over
    tables of this test's own (``t_…``, dropped with the test database's tables).
    """
    remote_fields_ = remote_policy_fields(unique_name)
    seeded = seed_remote_ledger(db, test_dsn, parsed(REMOTE_POLICY, remote_fields_), sandbox)
    rows_table = f"{unique_name}_rows"
    create_table(db, rows_table, [(i, i % 3, old() if i <= 30 else new()) for i in range(1, 41)])
    rows_fields = policy_fields(rows_table, window_rows=10, batch_rows=5, retain_days=3650)
    rows_policy = parsed(ROWS_POLICY, rows_fields)
    for window in plan(db, rows_policy):
        delete_window(db, rows_policy, window, batch_rows=5, dry_run=False)
    reconcile_run(db, rows_policy, "run-1")
    orders_table = f"{unique_name}_orders"
    create_table(db, orders_table, [(i, 1, old()) for i in range(1, 4)])
    orders_fields = policy_fields(orders_table)
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        yaml.safe_dump(
            {
                "policies": {
                    REMOTE_POLICY: remote_fields_,
                    ROWS_POLICY: rows_fields,
                    ORDERS_POLICY: orders_fields,
                }
            }
        )
    )
    passwords = tmp_path / "passwords.json"
    env = service_environment(
        RETENTION_POLICIES=str(policies),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{ADMIN}:admin,{VIEWER}:viewer",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
        AIRFLOW__API_AUTH__JWT_SECRET="retention-ui-test-secret",
        AIRFLOW_VAR_RETENTION_PAUSE=f"some_other_policy, {REMOTE_POLICY}",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="True",
    )
    serialize_replay_dag(env)  # so that the view's replay action can trigger it
    with api_server(env, tmp_path) as url:
        served = Served(url, json.loads(passwords.read_text()), seeded, tmp_path, policies)
        drop_future_runs(served)
        yield served


def add_run(db: Connection, run_id: str, logical: str, status: str, finished: str | None) -> None:
    """A run of ``ui_orders`` in its ledger (dates relative to now, as intervals)."""
    db.execute(
        "INSERT INTO retention.runs (policy, run_id, plan_id, dag_id, table_name, logical_date, "
        "anchor_source, cutoff, dry_run, status, window_rows, batch_rows, finished_at) "
        "VALUES (%(policy)s, %(run)s, %(run)s, %(dag)s, 'public.orders', now() + %(logical)s, "
        "'logical_date', now() - interval '30 days', %(dry)s, %(status)s, 10, 5, "
        "now() + %(finished)s)",
        {
            "policy": ORDERS_POLICY,
            "run": run_id,
            "dag": f"retention__{ORDERS_POLICY}",
            "logical": logical,
            "dry": status == "dry_run",
            "status": status,
            "finished": finished,
        },
    )


def drop_future_runs(served: Served) -> None:
    """Delete the runs of ``ui_orders`` dated in the future that an earlier test left in
    Airflow's metadata database (kept between tests): each would add its note to the card,
    and to the docs' screenshot."""
    runs = api(
        served,
        "GET",
        f"dags/retention__{ORDERS_POLICY}/dagRuns",
        params={"logical_date_gte": dt.datetime.now(dt.UTC).isoformat()},
    )
    for run in runs["dag_runs"]:
        gone = requests.delete(
            f"{served.url}/api/v2/dags/retention__{ORDERS_POLICY}/dagRuns/{run['dag_run_id']}",
            headers={"Authorization": f"Bearer {token(served, ADMIN)}"},
            timeout=30,
        )
        assert gone.status_code == 204, gone.text


def api(served: Served, method: str, path: str, **kwargs: Any) -> Any:
    """Airflow's public API as the admin; the answer's JSON."""
    answer = requests.request(
        method,
        f"{served.url}/api/v2/{path}",
        headers={"Authorization": f"Bearer {token(served, ADMIN)}"},
        timeout=30,
        **kwargs,
    )
    assert answer.status_code == 200, f"{answer.text}\n{tail(served.logs)}"
    return answer.json()


def seed_orders_runs(served: Served, db: Connection) -> str:
    """A run Airflow has as running-or-queued (started through its API, no scheduler
    here), planned in the ledger and the latest by logical date; a backfill of 2020
    that finished after it; a dry run. Returns the first one's run id."""
    started = api(
        served,
        "POST",
        f"dags/retention__{ORDERS_POLICY}/dagRuns",
        json={"logical_date": None, "conf": {}},
    )
    run_id = str(started["dag_run_id"])
    add_run(db, run_id, "0 seconds", "planned", None)
    add_run(db, "backfill__2020-01-01T00:00:00+00:00", "-6 years", "clean", "1 minute")
    add_run(db, "manual__dry_run", "-1 hour", "dry_run", "2 minutes")
    return run_id


def seed_erasures(db: Connection) -> tuple[int, int]:
    """Two erasures of ``ui_orders``: one done, one still requested past its deadline."""
    ids = []
    for key, state, deadline in (
        ("ui-done", "done", "29 days"),
        ("ui-late", "requested", "-1 hour"),
    ):
        row = db.execute(
            "INSERT INTO retention.erasures (request_key, policy, scope, value, reason, "
            "requested_by, deadline, state, rows_deleted, passes) VALUES (%s, %s, 'tenant', "
            "'7', 'ticket 4', 'test', now() + %s::interval, %s, %s, %s) RETURNING erasure_id",
            (
                f"{key}-{ORDERS_POLICY}",
                ORDERS_POLICY,
                deadline,
                state,
                '{"public.orders": 3}',
                2 if state == "done" else None,
            ),
        ).fetchone()
        ids.append(row["erasure_id"])
    return ids[0], ids[1]


def check_erasures(view: Any, done: int, late: int) -> None:
    """The card lists the policy's erasures with their state and deadline; a late one says so."""
    table = view.locator(f"section[data-policy={ORDERS_POLICY}] [data-figure=erasures]")
    late_row = table.locator(f"tr[data-erasure='{late}']")
    assert late_row.locator("[data-figure=erasure_state]").inner_text() == "requested"
    assert late_row.locator("[data-figure=erasure_late]").inner_text() == "late"
    assert late_row.locator("[data-figure=erasure_deadline]").inner_text().strip()
    done_row = table.locator(f"tr[data-erasure='{done}']")
    assert done_row.locator("[data-figure=erasure_state]").inner_text() == "done"
    assert done_row.locator("[data-figure=erasure_late]").count() == 0
    assert "3 rows" in done_row.inner_text()
    assert done_row.locator("[data-figure=erasure_passes]").inner_text() == "2"
    # recorded before passes were counted: said so, not shown as a false 0
    assert late_row.locator("[data-figure=erasure_passes]").inner_text() == "not counted"


def check_orders_card(view: Any, admin: Any, run_id: str) -> None:
    """The latest run by logical date, as Airflow has it; the others apart; the run id
    short, whole in its title, linked to the run's page in Airflow."""
    card = view.locator(f"section[data-policy={ORDERS_POLICY}]")
    status = card.locator("[data-figure=status]")
    assert (status.inner_text(), status.get_attribute("class")) == (
        "running",
        "status status-running",
    )
    link = card.locator("[data-figure=run_id]")
    assert link.get_attribute("title") == run_id
    assert link.inner_text() == f"{run_id[:21]}…"
    assert figure(card, "last_finished_status") == "clean"
    assert card.locator("[data-figure=last_finished_run_id]").get_attribute("title") == (
        "backfill__2020-01-01T00:00:00+00:00"
    )
    assert figure(card, "dry_run") == "dry_run"
    link.click()  # the whole page goes to the run in Airflow's UI
    admin.wait_for_url(lambda url: f"/dags/retention__{ORDERS_POLICY}/runs/" in url)


def check_replay_paused(admin: Any, viewer: Any, served: Served) -> None:
    """Paused, ``retention__replay`` would leave a started run queued: the page says so; the
    viewer may not unpause it (403); the admin's button unpauses it, in Airflow."""
    api(served, "PATCH", "dags/retention__replay", json={"is_paused": True})
    refused = viewer.request.post(
        f"{served.url}/retention/ui/replay-dag/unpause",
        headers={"Origin": served.url},
        max_redirects=0,
    )
    assert refused.status == 403, refused.text()
    admin.goto(f"{served.url}/retention/ui/dead-letters?policy={REMOTE_POLICY}")
    assert "is paused" in figure(admin, "replay_paused")
    with admin.expect_navigation():
        admin.locator("[data-action=unpause-replay]").click()
    assert admin.locator("[data-unpaused]").count() == 1
    assert api(served, "GET", "dags/retention__replay")["is_paused"] is False


def token(served: Served, user: str) -> str:
    answer = requests.post(
        f"{served.url}/auth/token",
        json={"username": user, "password": served.passwords[user]},
        timeout=30,
    )
    answer.raise_for_status()
    return str(answer.json()["access_token"])


def log_in(browser: Any, served: Served, user: str) -> Any:
    """A fresh browser context logged in as ``user`` through Airflow's login page."""
    context = browser.new_context(viewport={"width": 1600, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto(f"{served.url}/auth/login?next=/")
    page.locator('input[name="username"]').fill(user)
    page.locator('input[name="password"]').fill(served.passwords[user])
    page.locator('button[type="submit"]').click()
    page.wait_for_url(lambda url: "/auth/login" not in url)
    return page


def open_retention_entry(page: Any, served: Served) -> Any:
    """Click Browse → Retention in the UI's menu; returns the view's frame."""
    page.goto(f"{served.url}/")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="Retention").click()
    page.wait_for_url(lambda url: url.endswith("/plugin/retention"))
    frame = page.frame_locator("iframe")
    frame.locator("section.policy").first.wait_for()
    return frame


def figure(row: Any, name: str) -> str:
    return str(row.locator(f"[data-figure={name}]").first.inner_text()).strip()


def check_overview(view: Any, seeded: SeededLedger, run: dict[str, Any]) -> None:
    """Every figure of both policies, as the database has them."""
    row = view.locator(f"section[data-policy={REMOTE_POLICY}]")
    assert figure(row, "status") == run["status"]
    assert figure(row, "run_id") == "run-1"
    assert row.locator("[data-figure=run_id]").get_attribute("href") == (
        f"../../dags/retention__{REMOTE_POLICY}/runs/run-1"
    )
    assert figure(row, "rows_remaining") == f"{run['rows_remaining']:,}"
    assert figure(row, "pending") == str(seeded.pending)
    assert figure(row, "dead") == str(len(seeded.dead_keys))
    assert figure(row, "deletions_last_hour") == str(seeded.done)
    assert figure(row, "deletions_per_minute") == f"{seeded.done / 60:.1f}"
    assert figure(row, "rate_limited_last_hour") == str(RECENT_429S)
    assert figure(row, "events_pending") == str(seeded.events_pending)
    assert figure(row, "events_dead") == str(seeded.events_dead)
    assert figure(row, "effective_rate") == "0.0/s"  # closed by the 429s
    assert figure(row, "limiter_closed").startswith("closed until")
    assert figure(row, "queue_age").startswith("2 h")
    # the Variable names the policy, and reserialize created its DAG paused
    paused = figure(row, "paused")
    assert "paused by retention_pause" in paused
    assert "DAG paused" in paused
    for chart in ("deletions", "rate_limited", "queue_age"):  # the last 24 hours, inline SVG
        assert row.locator(f"[data-chart={chart}] svg path").count() == 1, chart
    rows = view.locator(f"section[data-policy={ROWS_POLICY}]")
    assert rows.locator("[data-chart=deletions] svg path").count() == 1
    assert (figure(rows, "status"), figure(rows, "rows_deleted")) == ("clean", "30")
    assert (figure(rows, "rows_remaining"), figure(rows, "lag")) == ("0", "none")
    assert figure(rows, "deletions_last_hour") == "30"
    assert "paused by" not in figure(rows, "paused")


def replay_post(page: Any, served: Served, key: str, origin: str) -> Any:
    return page.request.post(
        f"{served.url}/retention/ui/dead-letters/replay",
        form={"scope": "selected", "operation_key": key},
        headers={"Origin": origin},
        max_redirects=0,
    )


def check_viewer(viewer: Any, served: Served) -> None:
    """The viewer sees the dead letters but not the replay action, and is refused it."""
    dead_keys = served.seeded.dead_keys
    viewer.goto(f"{served.url}/retention/ui/dead-letters?policy={REMOTE_POLICY}")
    listed = viewer.locator("table[data-table=dead-letters] tbody tr[data-operation]")
    shown = listed.evaluate_all("rows => rows.map(r => r.dataset.operation)")
    assert sorted(shown) == dead_keys
    assert viewer.locator("input[name=operation_key]").count() == 0
    assert viewer.locator("[data-action=replay-selected]").count() == 0
    viewer.screenshot(path=str(SCREENSHOTS / "retention-dead-letters-viewer.png"))
    refused = replay_post(viewer, served, dead_keys[0], served.url)
    assert refused.status == 403, refused.text()


def check_refresh_and_select_all(admin: Any, served: Served) -> None:
    """Auto-refresh is on by default and reloads the page, but not while boxes are
    ticked; turned off, it stays off across reloads (localStorage). The select-all box
    ticks every operation, and unticks them."""
    dead_keys = served.seeded.dead_keys
    toggle = admin.locator("[data-refresh-toggle]")
    assert toggle.is_checked(), "on by default"
    with admin.expect_navigation():
        assert admin.evaluate("window.retentionRefresh.tick()") == "reloading"
    boxes = admin.locator("form[data-form=replay] input[name=operation_key]")
    admin.locator("[data-select-all=operation_key]").check()
    assert [boxes.nth(i).is_checked() for i in range(boxes.count())] == [True] * len(dead_keys)
    assert admin.evaluate("window.retentionRefresh.tick()") == "paused"
    assert "paused while a form is in use" in admin.locator("[data-refresh-state]").inner_text()
    admin.locator("[data-select-all=operation_key]").uncheck()
    assert not any(boxes.nth(i).is_checked() for i in range(boxes.count()))
    toggle.uncheck()
    assert admin.evaluate("localStorage.getItem('retention.autoRefresh')") == "off"
    admin.reload()
    assert not admin.locator("[data-refresh-toggle]").is_checked(), "remembered"
    assert admin.evaluate("window.retentionRefresh.tick()") == "off"
    admin.locator("[data-refresh-toggle]").check()


def discard_as_admin(admin: Any, served: Served) -> None:
    """Discarding the second dead operation records it and takes it off the list."""
    kept, discarded = served.seeded.dead_keys
    admin.locator(f"input[name=operation_key][value='{discarded}']").check()
    admin.locator("form[data-form=replay] input[name=reason]").fill("object kept on purpose")
    with admin.expect_navigation():
        admin.locator("[data-action=discard]").click()
    assert admin.locator("[data-discarded-now]").get_attribute("data-discarded-now") == "1"
    shown = admin.locator("table[data-table=dead-letters] tbody tr[data-operation]")
    assert shown.evaluate_all("rows => rows.map(r => r.dataset.operation)") == [kept]
    admin.screenshot(path=str(SCREENSHOTS / "retention-dead-letters-discarded.png"))


def replay_as_admin(admin: Any, served: Served) -> str:
    """A forged post is refused; ticking both dead operations and replaying starts a run."""
    dead_keys = served.seeded.dead_keys
    forged = replay_post(admin, served, dead_keys[0], "http://evil.example")
    assert forged.status == 403, forged.text()
    admin.goto(f"{served.url}/retention/ui/dead-letters?policy={REMOTE_POLICY}")
    check_refresh_and_select_all(admin, served)
    for key in dead_keys:
        admin.locator(f"input[name=operation_key][value='{key}']").check()
    admin.locator("form[data-form=replay] input[name=reason]").fill("receiver fixed")
    admin.screenshot(path=str(SCREENSHOTS / "retention-dead-letters-admin.png"))
    with admin.expect_navigation():
        admin.locator("[data-action=replay-selected]").click()
    started = admin.locator("[data-started]")
    assert started.count() > 0, f"no replay run started: {admin.inner_text('body')[:2000]}"
    return str(started.first.get_attribute("data-started"))


def check_evidence(admin: Any, key: str) -> None:
    """One operation's evidence, linked from its dead-letter row."""
    admin.locator(f"tr[data-operation='{key}'] a").click()
    admin.locator("table[data-table=evidence]").wait_for()
    assert "http_422" in figure(admin, "next")
    assert figure(admin, "state").startswith("dead")
    admin.screenshot(path=str(SCREENSHOTS / "retention-operation-admin.png"))


def check_holds(admin: Any, viewer: Any, served: Served, db: Connection) -> None:
    """The viewer reads the legal holds but has no form and is refused a post; the admin
    places a hold on a tenant of one policy and lifts it, both recorded with the name."""
    viewer.goto(f"{served.url}/retention/ui/holds")
    assert viewer.locator("[data-form=place-hold]").count() == 0
    refused = viewer.request.post(
        f"{served.url}/retention/ui/holds/place",
        form={"policy": ROWS_POLICY, "match": "tenant", "value": "1", "reason": "r"},
        headers={"Origin": served.url},
        max_redirects=0,
    )
    assert refused.status == 403, refused.text()
    admin.goto(f"{served.url}/retention/ui/holds")
    form = admin.locator("form[data-form=place-hold]")
    form.locator("select[name=policy]").select_option(ROWS_POLICY)
    form.locator("select[name=match]").select_option("tenant")
    form.locator("input[name=value]").fill("2")
    form.locator("input[name=reason]").fill("case 991")
    with admin.expect_navigation():
        form.locator("[data-action=place-hold]").click()
    hold_id = admin.locator("[data-placed-now]").get_attribute("data-placed-now")
    row = admin.locator(f"tr[data-hold='{hold_id}']")
    assert figure(row, "state") == "active"
    admin.screenshot(path=str(SCREENSHOTS / "retention-holds-admin.png"))
    row.locator("input[name=reason]").fill("case closed")
    with admin.expect_navigation():
        row.locator("[data-action=lift-hold]").click()
    assert admin.locator("[data-lifted-now]").get_attribute("data-lifted-now") == hold_id
    assert figure(admin.locator(f"tr[data-hold='{hold_id}']"), "state").startswith("lifted")
    recorded = db.execute(
        "SELECT policy, match, value, placed_by, lifted_by, lift_reason FROM retention.holds "
        "WHERE hold_id = %s",
        (int(str(hold_id)),),
    ).fetchone()
    assert recorded == {
        "policy": ROWS_POLICY,
        "match": "tenant",
        "value": "2",
        "placed_by": ADMIN,
        "lifted_by": ADMIN,
        "lift_reason": "case closed",
    }


def seed_notes(served: Served, db: Connection, unique_name: str) -> dict[str, Any]:
    """What the overview's notes and next steps are about, added once the first checks
    (and the docs' screenshot) are done: a dirty latest run of the remote policy; a run of
    the rows policy planned at an older cutoff after ``run-1`` had deleted its rows
    (reconciled: its summary says who did); a run of ``ui_orders`` Airflow will not start
    before its logical date, three weeks ahead; and, in the policies file, a policy whose
    timestamp column and child's ``foreign_key`` are misspelt."""
    db.execute(
        "INSERT INTO retention.runs (policy, run_id, plan_id, dag_id, table_name, logical_date, "
        "anchor_source, cutoff, dry_run, status, window_rows, batch_rows, planned_at, "
        "finished_at) SELECT policy, 'manual__dirty', 'manual__dirty', dag_id, table_name, "
        "now(), anchor_source, cutoff, false, 'dirty', window_rows, batch_rows, now(), now() "
        "FROM retention.runs WHERE policy = %s AND run_id = 'run-1'",
        (REMOTE_POLICY,),
    )
    rows_policy = {p.name: p for p in load_policies(served.policies).policies}[ROWS_POLICY]
    earlier = CUTOFF - dt.timedelta(days=1)
    ten_years = dt.timedelta(days=rows_policy.retain_days)
    # nothing older than its cutoff is left: run-1 deleted it
    assert (
        plan(db, rows_policy, run_id="run-0", cutoff=earlier, logical_date=earlier + ten_years)
        == []
    )
    reconcile_run(db, rows_policy, "run-0")
    run_1 = db.execute(
        "SELECT logical_date FROM retention.runs WHERE policy = %s AND run_id = 'run-1'",
        (ROWS_POLICY,),
    ).fetchone()
    assert run_1 is not None
    ahead = (dt.datetime.now(dt.UTC) + dt.timedelta(days=21)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    future = api(
        served,
        "POST",
        f"dags/retention__{ORDERS_POLICY}/dagRuns",
        json={
            "dag_run_id": f"manual__{unique_name}",
            "logical_date": ahead.isoformat(),
            "conf": {},
        },
    )
    typo = f"{unique_name}_typo"
    create_table(db, typo, [(1, 1, old())])
    db.execute(
        sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, asset_id bigint REFERENCES {})").format(
            sql.Identifier("public", f"{typo}_r"), sql.Identifier("public", typo)
        )
    )
    fields = policy_fields(
        typo,
        timestamp_column="creatd_at",
        children=[{"table": f"{typo}_r", "foreign_key": "asset_idd"}],
    )
    document = yaml.safe_load(served.policies.read_text())
    document["policies"][TYPO_POLICY] = fields
    served.policies.write_text(yaml.safe_dump(document))
    typo_policy = parsed(TYPO_POLICY, fields)
    return {
        "covered": covered_note(earlier, "run-1", run_1["logical_date"]),
        "future_run": str(future["dag_run_id"]),
        "ahead": ahead,
        # what the run's first task refuses: the table's check, then its children's
        "table_check": table_fit(db, typo_policy).problems
        + coupled_tables(db, typo_policy).problems,
    }


def check_notes(view: Any, notes: dict[str, Any]) -> None:
    """The overview's notes, each on its policy's card."""
    orders = view.locator(f"section[data-policy={ORDERS_POLICY}]")
    future_runs = orders.locator("[data-figure=future_run]")
    assert future_runs.count() == 1, future_runs.all_inner_texts()
    future = " ".join(future_runs.inner_text().split())
    run_id = notes["future_run"]
    assert future.startswith(f"run {run_id} has the logical date {notes['ahead']:%Y-%m-%d} ("), (
        future
    )
    assert f"Mark run {run_id} failed" in future
    rows = view.locator(f"section[data-policy={ROWS_POLICY}]")
    assert figure(rows, "last_finished_run_id") == "run-0"
    assert figure(rows, "last_finished_covered") == notes["covered"]
    assert figure(rows, "status") == "clean", "run-1 is still the latest by logical date"
    typo = view.locator(f"section[data-policy={TYPO_POLICY}]")
    listed = typo.locator("[data-figure=table_check] li").all_inner_texts()
    assert listed == notes["table_check"]
    assert any("did you mean 'created_at'?" in problem for problem in listed)
    assert any("column 'asset_idd' does not exist" in problem for problem in listed)
    assert typo.locator("[data-figure=status]").count() == 0, "no figures"


def check_dirty_card(admin: Any, view: Any, served: Served) -> None:
    """The dirty card's next steps: its reconcile task in Airflow, its dead letters (the
    link leads to them, in the view's frame), the runbook section for dead letters."""
    card = view.locator(f"section[data-policy={REMOTE_POLICY}]")
    assert figure(card, "status") == "dirty"
    steps = card.locator("[data-figure=next_step]")
    reconcile = steps.locator("[data-link=reconcile]")
    assert reconcile.evaluate("a => a.href") == (
        f"{served.url}/dags/retention__{REMOTE_POLICY}/runs/manual__dirty/tasks/reconcile"
    )
    assert reconcile.get_attribute("target") == "_top"
    runbook = steps.locator("[data-link=runbook]").inner_text()
    assert runbook == RUNBOOK["dead_letters"].heading
    assert RUNBOOK_PAGE in steps.inner_text()
    kept = served.seeded.dead_keys[0]  # the other was discarded
    dead = steps.locator("[data-link=dead_letters]")
    # the link counts what the page it opens lists: the dead letters awaiting review
    assert " ".join(dead.inner_text().split()) == "its 1 dead letters awaiting review"
    assert "(1 reviewed and discarded)" in " ".join(steps.inner_text().split())
    assert figure(card, "dead") == "2"
    dead.click()
    listed = view.locator("table[data-table=dead-letters] tbody tr[data-operation]")
    listed.first.wait_for()
    frames = [frame.url for frame in admin.frames]
    assert f"{served.url}/retention/ui/dead-letters?policy={REMOTE_POLICY}" in frames, frames
    assert listed.evaluate_all("rows => rows.map(r => r.dataset.operation)") == [kept]


def check_broken_file(page: Any, served: Served) -> None:
    """A policies file that does not parse: the overview shows its problem first, and does
    not read as a permissions problem."""
    served.policies.write_text("policies:\n  ledger: {retain_days: [\n")
    page.goto(f"{served.url}/retention/ui/")
    problems = page.locator("[data-figure=policy_problems]")
    assert "not valid YAML" in problems.inner_text()
    none = page.locator("[data-figure=no_policy]")
    assert none.inner_text().startswith("No policy is shown: the policies file has the problems")
    assert "No policy whose DAG you may read" not in page.inner_text("body")
    above, below = problems.bounding_box(), none.bounding_box()
    assert above is not None
    assert below is not None
    assert above["y"] < below["y"], "the file's problems first"


def test_the_retention_view_in_chromium(
    chromium: str, served: Served, db: Connection, unique_name: str
) -> None:
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    seeded = served.seeded
    assert seeded.policy.name == REMOTE_POLICY
    run = db.execute(
        "SELECT status, rows_remaining FROM retention.runs WHERE policy = %s AND run_id = 'run-1'",
        (REMOTE_POLICY,),
    ).fetchone()
    assert run is not None

    # created unpaused, though new DAGs are paused here: a replay started from the view runs
    assert api(served, "GET", "dags/retention__replay")["is_paused"] is False
    orders_run = seed_orders_runs(served, db)
    erasure_done, erasure_late = seed_erasures(db)

    # no login: the browser is sent to Airflow's login page
    anonymous = requests.get(f"{served.url}/retention/ui/", allow_redirects=False, timeout=30)
    assert anonymous.status_code == 303
    assert "/auth/login" in anonymous.headers["location"]

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            admin = log_in(browser, served, ADMIN)
            view = open_retention_entry(admin, served)
            check_overview(view, seeded, run)
            admin.screenshot(path=str(SCREENSHOTS / "retention-overview-admin.png"))
            check_erasures(view, erasure_done, erasure_late)
            check_orders_card(view, admin, orders_run)  # leaves the view for Airflow's run page
            viewer = log_in(browser, served, VIEWER)
            check_viewer(viewer, served)
            check_replay_paused(admin, viewer, served)
            run_id = replay_as_admin(admin, served)
            discard_as_admin(admin, served)
            check_evidence(admin, seeded.dead_keys[0])
            check_holds(admin, viewer, served, db)
            notes = seed_notes(served, db, unique_name)
            admin.goto(f"{served.url}/plugin/retention")
            view = admin.frame_locator("iframe")
            view.locator("section.policy").first.wait_for()
            check_notes(view, notes)
            check_dirty_card(admin, view, served)
            for user in (viewer, admin):  # both may read every DAG: both see the problems
                check_broken_file(user, served)
        finally:
            browser.close()

    answer = requests.get(
        f"{served.url}/api/v2/dags/retention__replay/dagRuns/{run_id}",
        headers={"Authorization": f"Bearer {token(served, ADMIN)}"},
        timeout=30,
    )
    assert answer.status_code == 200, f"{answer.text}\n{tail(served.logs)}"
    started_run = answer.json()
    assert started_run["conf"] == {
        "kind": "operations",
        "policy": REMOTE_POLICY,
        "operation_keys": seeded.dead_keys,
        "reason": "receiver fixed",
    }
    assert started_run["triggering_user_name"] == ADMIN
    assert started_run["note"] == f"Started from the Retention view by {ADMIN}"
