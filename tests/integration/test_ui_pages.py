"""The Retention view's pages in process, over the real Postgres: logins, permissions, the
CSRF guard, the replay form's runs, the evidence page and unreadable databases.

Airflow's answers (who is logged in, who may trigger) come from a stand-in
(``tests/support/ui_access.py``); the real ones are tested on a real api-server
in ``tests/e2e/test_retention_ui.py``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import pytest
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient
from psycopg import sql

from retention.airflow.access import REPLAY_DAG_ID, FutureRun
from retention.db.connection import Connection, connect_dsn
from retention.db.table_check import table_fit
from retention.erasures.request import ERASURE_DAG_ID
from retention.evidence.lookup import find_operations
from retention.policy import parse_policy
from retention.queue.bound import DrainSetting, PassTime, judge
from retention.rows.children import coupled_tables
from retention.summary import rate_limit_headers_note
from retention.ui.app import create_app
from tests.support.children import remote_family
from tests.support.policies import make_policy, policy_fields, remote_fields
from tests.support.remote import enqueue_all
from tests.support.tables import create_table, old
from tests.support.ui_access import StandInAccess, StandInUser
from tests.support.ui_seed import SeededLedger, seeded_remote_policy

BASE = "http://testserver"
ORIGIN = {"Origin": BASE}
USERS = {"admin-token": StandInUser("alice", "admin"), "viewer-token": StandInUser("vic", "viewer")}


@dataclass
class Pages:
    client: TestClient
    access: StandInAccess
    seeded: SeededLedger
    missing_policy: str  # a policy whose table does not exist

    def as_user(self, token: str) -> TestClient:
        self.client.cookies.set("_token", token)
        return self.client


@pytest.fixture
def pages(
    db: Connection,
    test_dsn: str,
    unique_name: str,
    sandbox,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Pages]:
    fields, seeded = seeded_remote_policy(db, test_dsn, unique_name, sandbox)
    missing = f"{unique_name}_gone"
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        yaml.safe_dump({"policies": {unique_name: fields, missing: policy_fields(missing)}})
    )
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    access = StandInAccess(users=USERS, paused={seeded.policy.dag_id: False}, switch="all")
    root = FastAPI()
    app = create_app(airflow_auth=False, authorize=access.may_read, ui_access=access)
    root.mount("/retention", app)
    with TestClient(root, base_url=BASE, follow_redirects=False) as client:
        yield Pages(client, access, seeded, missing)


def test_no_login_goes_to_the_login_page(pages: Pages) -> None:
    answer = pages.client.get("/retention/ui/")
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/auth/login?next={BASE}/retention/ui/"
    posted = pages.client.post("/retention/ui/dead-letters/replay", headers=ORIGIN)
    assert posted.status_code == 401
    assert "Log in to Airflow" in posted.text


def test_the_overview_shows_each_policy_or_why_it_cannot(pages: Pages) -> None:
    page = pages.as_user("viewer-token").get("/retention/ui/")
    assert page.status_code == 200
    name = pages.seeded.policy.name
    section = page.text[page.text.index(f'data-policy="{name}"') :]
    assert re.search(r'data-figure="pending">2<', section)
    # the card's title opens the policy's DAG in Airflow, outside the view's frame
    assert f'href="../../dags/{pages.seeded.policy.dag_id}" target="_top"' in section
    assert "paused by retention_pause" in section  # the Variable says "all"
    gone = page.text[page.text.index(f'data-policy="{pages.missing_policy}"') :]
    assert re.search(r'data-figure="error">no retention ledger or table yet', gone)


def test_a_policy_naming_a_column_its_table_lacks_shows_what_its_run_would_refuse(
    pages: Pages, db: Connection, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The card says what the run's first task would refuse, with the same words, instead
    of the figures (which could not be read) or a database error."""
    misspelt = f"{unique_name}_typo"
    create_table(db, misspelt, [(1, 1, old())])
    path = Path(os.environ["RETENTION_POLICIES"])
    policies = yaml.safe_load(path.read_text())
    policies["policies"][misspelt] = policy_fields(misspelt, timestamp_column="creatd_at")
    path.write_text(yaml.safe_dump(policies))
    page = pages.as_user("viewer-token").get("/retention/ui/")
    assert page.status_code == 200
    card = page.text[page.text.index(f'data-policy="{misspelt}"') :]
    card = card[: card.index("</section>")]
    (check,) = re.findall(r'data-figure="table_check">(.*?)</div>', card, flags=re.DOTALL)
    (problem,) = [unescape(item) for item in re.findall(r"<li>(.*?)</li>", check)]
    assert problem == str(
        table_fit(db, make_policy(misspelt, timestamp_column="creatd_at")).problems[0]
    )
    assert "did you mean 'created_at'?" in problem
    assert 'data-figure="error"' not in card
    seeded = page.text[page.text.index(f'data-policy="{pages.seeded.policy.name}"') :]
    assert 'data-figure="table_check"' not in seeded[: seeded.index("</section>")]


def test_a_policy_whose_children_do_not_fit_shows_what_its_run_would_refuse(
    pages: Pages, db: Connection, unique_name: str
) -> None:
    """A child table whose ``foreign_key`` is misspelt, and one that does not exist: the
    run's first task refuses both (``check_coupled_tables``), so the card names them too,
    with the same words, though the policy's own table fits."""
    parent = f"{unique_name}_kin"
    create_table(db, parent, [(1, 1, old())])
    child = sql.Identifier("public", f"{parent}_r")
    db.execute(
        sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, asset_id bigint REFERENCES {})").format(
            child, sql.Identifier("public", parent)
        )
    )
    children = [
        {"table": f"{parent}_r", "foreign_key": "asset_idd"},
        {"table": f"{parent}_gone", "foreign_key": "asset_id"},
    ]
    path = Path(os.environ["RETENTION_POLICIES"])
    policies = yaml.safe_load(path.read_text())
    policies["policies"][parent] = policy_fields(parent, children=children)
    path.write_text(yaml.safe_dump(policies))
    page = pages.as_user("viewer-token").get("/retention/ui/")
    card = page.text[page.text.index(f'data-policy="{parent}"') :]
    card = card[: card.index("</section>")]
    (check,) = re.findall(r'data-figure="table_check">(.*?)</div>', card, flags=re.DOTALL)
    shown = [unescape(item) for item in re.findall(r"<li>(.*?)</li>", check, flags=re.DOTALL)]
    policy = make_policy(parent, children=children)
    assert table_fit(db, policy).fits
    assert shown == coupled_tables(db, policy).problems
    assert f"field 'children' (public.{parent}_r): column 'asset_idd' does not exist" in shown[0]
    assert (
        f"field 'children' (public.{parent}_gone): table public.{parent}_gone does not"
        in (shown[1])
    )
    assert 'data-figure="error"' not in card


def test_a_policy_whose_dag_the_user_may_not_read_is_not_shown(pages: Pages) -> None:
    pages.access.unreadable_dags.add(pages.seeded.policy.dag_id)
    page = pages.as_user("admin-token").get("/retention/ui/")
    assert f'data-policy="{pages.seeded.policy.name}"' not in page.text
    letters = pages.client.get("/retention/ui/dead-letters")
    assert "No dead operations match." in letters.text
    key = pages.seeded.dead_keys[0]
    assert pages.client.get(f"/retention/ui/operations/{key}").status_code == 404


def test_a_viewer_sees_dead_letters_without_the_replay_action(pages: Pages) -> None:
    client = pages.as_user("viewer-token")
    page = client.get("/retention/ui/dead-letters")
    assert page.status_code == 200
    assert all(key in page.text for key in pages.seeded.dead_keys)
    assert 'name="operation_key"' not in page.text
    assert "data-action=" not in page.text
    refused = client.post(
        "/retention/ui/dead-letters/replay",
        data={"scope": "selected", "operation_key": pages.seeded.dead_keys},
        headers=ORIGIN,
    )
    assert refused.status_code == 403
    assert REPLAY_DAG_ID in refused.text
    assert pages.access.triggered == []


@pytest.mark.parametrize(
    "form",
    [
        {"scope": "selected", "operation_key": "<dead keys>"},
        {"scope": "filter", "failure_class": "http_422"},
        {"scope": "events", "event_id": "<dead event>"},
    ],
    ids=["ticked", "filter", "events"],
)
def test_replaying_a_policy_needs_the_right_to_trigger_its_dag(
    pages: Pages, db: Connection, form: dict[str, str]
) -> None:
    """alice may trigger retention__replay and read the policy's DAG, not trigger it."""
    policy = pages.seeded.policy
    pages.access.untriggerable_dags.add(policy.dag_id)
    client = pages.as_user("admin-token")
    (event_id,) = [
        row["event_id"]
        for row in db.execute(
            "SELECT event_id FROM retention.outbox WHERE state = 'dead' AND policy = %s",
            (policy.name,),
        )
    ]
    values = {"<dead keys>": pages.seeded.dead_keys, "<dead event>": event_id}
    data = {"policy": policy.name, **{k: values.get(v, v) for k, v in form.items()}}
    refused = client.post("/retention/ui/dead-letters/replay", data=data, headers=ORIGIN)
    assert refused.status_code == 403
    assert f"You may not trigger the DAG {policy.dag_id!r}" in unescape(refused.text)
    assert f"replaying the dead letters of policy {policy.name!r}" in unescape(refused.text)
    assert pages.access.triggered == []
    page = client.get(f"/retention/ui/dead-letters?policy={policy.name}&failure_class=http_422")
    assert all(key in page.text for key in pages.seeded.dead_keys), "still readable"
    assert 'name="operation_key"' not in page.text, "no box to tick for a replay it may not do"
    assert 'name="event_id"' not in page.text
    assert "data-action=" not in page.text


def test_replaying_the_ticked_operations_starts_one_run(pages: Pages) -> None:
    client = pages.as_user("admin-token")
    page = client.get("/retention/ui/dead-letters")
    assert page.text.count('name="operation_key"') == 2
    not_dead = "f" * 64
    answer = client.post(
        "/retention/ui/dead-letters/replay",
        data={
            "scope": "selected",
            "operation_key": [*pages.seeded.dead_keys, not_dead, "not-a-key"],
            "reason": "fixed the receiver",
        },
        headers=ORIGIN,
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/retention/ui/dead-letters?started=manual__1"
    assert pages.access.triggered == [
        (
            REPLAY_DAG_ID,
            {
                "kind": "operations",
                "policy": pages.seeded.policy.name,
                "operation_keys": pages.seeded.dead_keys,
                "reason": "fixed the receiver",
            },
            "alice",
            "Started from the Retention view by alice",
        )
    ]
    shown = client.get(answer.headers["location"])
    assert 'data-started="manual__1"' in shown.text


def test_replaying_by_filter_needs_a_policy_and_a_class(pages: Pages) -> None:
    client = pages.as_user("admin-token")
    name = pages.seeded.policy.name
    page = client.get(f"/retention/ui/dead-letters?policy={name}&failure_class=http_422")
    assert 'data-action="replay-filter"' in page.text
    vague = client.post(
        "/retention/ui/dead-letters/replay",
        data={"scope": "filter", "policy": name},
        headers=ORIGIN,
    )
    assert vague.status_code == 400
    assert "choose a policy and a failure class" in vague.text
    answer = client.post(
        "/retention/ui/dead-letters/replay",
        data={
            "scope": "filter",
            "policy": name,
            "failure_class": "http_422",
            "since": "2026-01-01T00:00:00",
        },
        headers=ORIGIN,
    )
    assert answer.status_code == 303, answer.text
    (triggered,) = pages.access.triggered
    assert triggered[1] == {
        "kind": "operations",
        "policy": name,
        "failure_class": "http_422",
        "since": "2026-01-01T00:00:00+00:00",
        "operation_keys": [],
        "reason": "replayed from the Retention view by alice",
    }


@pytest.mark.parametrize(
    "headers",
    [{}, {"Origin": "http://evil.example"}, {"Referer": "http://evil.example/page"}],
    ids=["no-origin", "other-origin", "other-referer"],
)
def test_a_replay_from_another_origin_is_refused(pages: Pages, headers: dict[str, str]) -> None:
    answer = pages.as_user("admin-token").post(
        "/retention/ui/dead-letters/replay",
        data={"scope": "selected", "operation_key": pages.seeded.dead_keys},
        headers=headers,
    )
    assert answer.status_code == 403
    assert "did not come from this Airflow's own pages" in unescape(answer.text)
    assert pages.access.triggered == []


def test_behind_a_proxy_links_are_paths_and_the_public_host_may_post(
    pages: Pages, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a TLS-terminating proxy (Astro) the page must not link to http:// URLs,
    and a form posted from the public host (Airflow's base_url) is this server's own."""
    client = pages.as_user("admin-token")
    page = client.get("/retention/ui/dead-letters")
    assert 'action="/retention/ui/dead-letters/replay"' in page.text
    assert "http://testserver" not in page.text
    public = {"Origin": "https://airflow.example.com"}
    form = {"scope": "selected", "operation_key": pages.seeded.dead_keys, "reason": "proxy"}
    refused = client.post("/retention/ui/dead-letters/replay", data=form, headers=public)
    assert refused.status_code == 403, "an unknown public host is another origin"
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/")
    taken = client.post("/retention/ui/dead-letters/replay", data=form, headers=public)
    assert taken.status_code == 303, taken.text
    forwarded = {**public, "X-Forwarded-Host": "airflow.example.com"}
    monkeypatch.delenv("AIRFLOW__API__BASE_URL")
    again = client.post("/retention/ui/dead-letters/replay", data=form, headers=forwarded)
    assert again.status_code in (303, 404), again.text  # 404: nothing dead is left to replay


def test_replaying_nothing_dead_says_so(pages: Pages) -> None:
    client = pages.as_user("admin-token")
    empty = client.post(
        "/retention/ui/dead-letters/replay", data={"scope": "selected"}, headers=ORIGIN
    )
    assert empty.status_code == 400
    none_dead = client.post(
        "/retention/ui/dead-letters/replay",
        data={"scope": "selected", "operation_key": "0" * 64},
        headers=ORIGIN,
    )
    assert none_dead.status_code == 404
    assert pages.access.triggered == []


def test_bad_filters_are_named(pages: Pages) -> None:
    client = pages.as_user("viewer-token")
    bad_since = client.get("/retention/ui/dead-letters?since=yesterday")
    assert bad_since.status_code == 400
    assert "'yesterday' is not a date or time" in unescape(bad_since.text)
    unknown = client.get("/retention/ui/dead-letters?policy=nope")
    assert unknown.status_code == 404
    assert "no policy 'nope'" in unescape(unknown.text)


def test_the_evidence_page_shows_the_explain_record(pages: Pages) -> None:
    client = pages.as_user("viewer-token")
    key = pages.seeded.dead_keys[0]
    page = client.get(f"/retention/ui/operations/{key}")
    assert page.status_code == 200
    assert key in page.text
    assert "human review" in page.text
    assert "http_422" in page.text
    assert client.get("/retention/ui/operations/not-a-key").status_code == 404
    assert client.get(f"/retention/ui/operations/{'0' * 64}").status_code == 404


def test_values_are_escaped(pages: Pages, db: Connection) -> None:
    db.execute(
        "UPDATE retention.operations SET reason = '<script>alert(1)</script>' "
        "WHERE operation_key = %s",
        (pages.seeded.dead_keys[0],),
    )
    page = pages.as_user("viewer-token").get("/retention/ui/dead-letters")
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


def test_the_overview_says_what_bounded_the_last_runs_drain(pages: Pages, db: Connection) -> None:
    """The card shows the verdict reconcile recorded in the run's summary, with what to tune."""
    name = pages.seeded.policy.name
    shown = pages.as_user("viewer-token").get("/retention/ui/").text
    assert 'data-figure="bound_by"' not in shown, "nothing measured yet: no verdict shown"
    capacity = PassTime(
        seconds=10.0,
        calling=9.0,
        calls=50,
        pool_sampled=10.0,
        pool_busy=9.7,
        pool_slot_seconds=20.0,
        rate_seconds=200.0,
    )
    bound = judge(capacity, DrainSetting("media_api", 1, 20))
    db.execute(
        "UPDATE retention.runs SET summary = summary || jsonb_build_object('bound', %s::jsonb) "
        "WHERE policy = %s AND run_id = %s",
        (json.dumps(dataclasses.asdict(bound)), name, pages.seeded.run_id),
    )
    page = pages.as_user("viewer-token").get("/retention/ui/")
    section = unescape(page.text[page.text.index(f'data-policy="{name}"') :])
    assert 'data-figure="bound_by">capacity<' in section
    assert (
        'data-figure="bound_says">capacity-bound: pool `media_api` has 2 slots, busy 97% of the '
        "time; at 180 ms per call, 20/s needs 5<"
    ) in section


def test_a_run_airflow_refuses_is_reported(pages: Pages) -> None:
    pages.access.refuse = "Airflow does not know the DAG 'retention__replay' yet"
    answer = pages.as_user("admin-token").post(
        "/retention/ui/dead-letters/replay",
        data={"scope": "selected", "operation_key": pages.seeded.dead_keys},
        headers=ORIGIN,
    )
    assert answer.status_code == 409
    assert "does not know the DAG" in unescape(answer.text)


def test_a_locked_table_fails_its_card_not_the_page(pages: Pages, test_dsn: str) -> None:
    """The view waits for a lock no longer than the policy's lock_timeout_ms (1 s)."""
    with connect_dsn(test_dsn) as locker, locker.transaction():
        locker.execute(
            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                sql.Identifier(*pages.seeded.policy.table.split("."))
            )
        )
        page = pages.as_user("viewer-token").get("/retention/ui/")
    assert page.status_code == 200
    card = page.text[page.text.index(f'data-policy="{pages.seeded.policy.name}"') :]
    assert re.search(r'data-figure="error">LockNotAvailable: canceling statement', card)
    assert "paused by retention_pause" in card  # what Airflow knows is still shown


def test_replaying_dead_events(pages: Pages, db: Connection) -> None:
    client = pages.as_user("admin-token")
    (event_id,) = [
        row["event_id"]
        for row in db.execute(
            "SELECT event_id FROM retention.outbox WHERE state = 'dead' AND policy = %s",
            (pages.seeded.policy.name,),
        )
    ]
    page = client.get("/retention/ui/dead-letters")
    assert f'data-event="{event_id}"' in page.text
    assert 'data-action="replay-events"' in page.text
    answer = client.post(
        "/retention/ui/dead-letters/replay",
        data={"scope": "events", "event_id": [event_id, "evt_" + "0" * 32], "reason": "410 fixed"},
        headers=ORIGIN,
    )
    assert answer.status_code == 303, answer.text
    assert [conf for _, conf, _, _ in pages.access.triggered] == [
        {
            "kind": "events",
            "policy": pages.seeded.policy.name,
            "event_ids": [event_id],
            "reason": "410 fixed",
        }
    ]
    viewer = pages.as_user("viewer-token").get("/retention/ui/dead-letters")
    assert f'data-event="{event_id}"' in viewer.text
    assert 'name="event_id"' not in viewer.text


def test_a_policy_the_file_gets_wrong_is_named_on_the_overview(
    pages: Pages, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policies = tmp_path / "broken.yaml"
    policies.write_text(yaml.safe_dump({"policies": {"broken": {"retain_days": "thirty"}}}))
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    page = pages.as_user("viewer-token").get("/retention/ui/")
    assert page.status_code == 200
    shown = unescape(page.text)
    assert "policy 'broken', field 'retain_days': must be a whole number, got 'thirty'" in shown


def test_an_operation_the_user_may_not_read_is_as_unknown_as_a_missing_one(pages: Pages) -> None:
    """Neither the JSON API nor the view confirms that a key exists in a DAG the user may
    not read, nor names its policy: both answer exactly as for a key nobody knows."""
    policy = pages.seeded.policy
    key, unknown = pages.seeded.dead_keys[0], "0" * 64
    client = pages.as_user("admin-token")
    assert client.get(f"/retention/operations/{key}").status_code == 200
    pages.access.unreadable_dags.add(policy.dag_id)
    for path in ("/retention/operations/{}", "/retention/ui/operations/{}"):
        hidden, missing = client.get(path.format(key)), client.get(path.format(unknown))
        assert (hidden.status_code, missing.status_code) == (404, 404), path
        assert hidden.text.replace(key, "KEY") == missing.text.replace(unknown, "KEY"), path
        assert policy.name not in hidden.text


def test_the_policy_file_problems_are_shown_only_for_policies_the_user_may_read(
    pages: Pages, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policies = tmp_path / "two-broken.yaml"
    policies.write_text(
        yaml.safe_dump(
            {
                "policies": {
                    "broken": {"retain_days": "thirty"},
                    "secret_ledger": {"retain_days": "ninety"},
                }
            }
        )
    )
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    pages.access.unreadable_dags.add("retention__secret_ledger")
    shown = unescape(pages.as_user("viewer-token").get("/retention/ui/").text)
    assert "policy 'broken', field 'retain_days': must be a whole number, got 'thirty'" in shown
    assert "secret_ledger" not in shown
    assert "ninety" not in shown
    listed = shown.count("  - policy 'broken', ")
    assert f"{listed} problem(s)" in shown, "the count is of the problems shown"


def test_a_policies_file_that_cannot_be_read_is_explained_to_who_may_read_every_dag(
    pages: Pages, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's own error (here: YAML that does not parse, quoting the file) names no
    policy: only users who may read every DAG see it; the others learn that it failed."""
    policies = tmp_path / "not-yaml.yaml"
    policies.write_text("policies:\n  secret_ledger: {retain_days: [\n")
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    client = pages.as_user("viewer-token")
    everything = unescape(client.get("/retention/ui/").text)
    assert "not valid YAML" in everything
    pages.access.unreadable_dags.add("retention__other")
    some = unescape(client.get("/retention/ui/").text)
    assert "not valid YAML" not in some
    assert "secret_ledger" not in some
    assert "The policies file could not be read" in some


DOWN = '{"conn_type": "postgres", "host": "127.0.0.1", "port": 1, "login": "postgres"}'


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("not a key", 404),
        ("unknown key", 404),
        ("unreadable policy", 404),
        ("readable", 200),
        ("database down", 503),
    ],
)
def test_the_json_api_and_the_view_answer_a_lookup_alike(
    pages: Pages, monkeypatch: pytest.MonkeyPatch, case: str, status: int
) -> None:
    """One lookup, one answer policy: the JSON API and the evidence page give the same
    status, and the same words, for each case; a database that did not answer is a 503."""
    key = {"not a key": "not-a-key", "unknown key": "0" * 64}.get(case, pages.seeded.dead_keys[0])
    if case == "unreadable policy":
        pages.access.unreadable_dags.add(pages.seeded.policy.dag_id)
    if case == "database down":
        monkeypatch.setenv("AIRFLOW_CONN_RETENTION_TEST", DOWN)
    client = pages.as_user("viewer-token")
    api = client.get(f"/retention/operations/{key}")
    view = client.get(f"/retention/ui/operations/{key}")
    assert (api.status_code, view.status_code) == (status, status), view.text
    if status != 200:
        assert api.json()["detail"] in unescape(view.text)


UNDEFINED_CONN_ID = "retention_undefined"  # no Airflow connection has this id


def test_a_policy_whose_connection_is_not_defined_is_a_database_that_did_not_answer(
    pages: Pages, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remote policy whose postgres_conn_id names no Airflow connection: an unknown key is
    a 503 naming that connection (JSON API and view alike), and an operation of a policy on
    a database that answers is still found."""
    monkeypatch.delenv(f"AIRFLOW_CONN_{UNDEFINED_CONN_ID.upper()}", raising=False)
    path = Path(os.environ["RETENTION_POLICIES"])
    policies = yaml.safe_load(path.read_text())
    other = f"{pages.seeded.policy.name}_nowhere"
    policies["policies"][other] = policy_fields(
        other, postgres_conn_id=UNDEFINED_CONN_ID, remote=remote_fields(other)
    )
    path.write_text(yaml.safe_dump(policies))
    client = pages.as_user("viewer-token")
    for path_of in ("/retention/operations/{}", "/retention/ui/operations/{}"):
        unknown = client.get(path_of.format("0" * 64))
        assert unknown.status_code == 503, unknown.text
        assert UNDEFINED_CONN_ID in unescape(unknown.text)
        known = client.get(path_of.format(pages.seeded.dead_keys[0]))
        assert known.status_code == 200, known.text


def test_every_page_needs_the_login_dependency(pages: Pages) -> None:
    """The login guard is one FastAPI dependency on every page, not a check each page
    repeats (or forgets)."""
    from retention.ui.app import ui_router

    for route in ui_router(pages.access).routes:
        called = [dependency.call for dependency in route.dependant.dependencies]
        assert "logged_in" in [getattr(call, "__name__", "") for call in called], route


def test_a_replay_whose_database_does_not_answer_is_a_503(
    pages: Pages, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay form's check that the ticked keys are still dead reads each database
    through the same helper as every page: one that does not answer is named, not a 500."""
    client = pages.as_user("admin-token")
    monkeypatch.setenv("AIRFLOW_CONN_RETENTION_TEST", DOWN)
    answer = client.post(
        "/retention/ui/dead-letters/replay",
        data={"scope": "selected", "operation_key": pages.seeded.dead_keys},
        headers=ORIGIN,
    )
    assert answer.status_code == 503
    assert "retention_test" in unescape(answer.text)
    assert pages.access.triggered == []


def discard_post(client: TestClient, keys: list[str], note: str = "", **headers: str):
    return client.post(
        "/retention/ui/dead-letters/discard",
        data={"operation_key": keys, "reason": note},
        headers=headers or ORIGIN,
    )


def listed_operations(page_text: str) -> list[str]:
    return sorted(re.findall(r'<tr data-operation="([0-9a-f]+)"', page_text))


def test_discarding_records_who_and_why_and_takes_them_off_the_default_list(
    pages: Pages, db: Connection
) -> None:
    """A discard is evidence (who, when, the note, which dead operation); the discarded
    operation leaves the default list, is listed under "discarded" with its record, and
    the only way back is a replay, itself recorded."""
    kept, discarded = pages.seeded.dead_keys
    client = pages.as_user("admin-token")
    page = client.get("/retention/ui/dead-letters")
    assert 'data-action="discard"' in page.text
    answer = discard_post(client, [discarded, "f" * 64], "object kept on purpose")
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/retention/ui/dead-letters?discarded_now=1"
    (record,) = db.execute(
        "SELECT d.policy, d.discarded_by, d.note, d.dead_since = o.updated_at AS same_death "
        "FROM retention.discards AS d JOIN retention.operations AS o USING (operation_key) "
        "WHERE d.operation_key = %s",
        (discarded,),
    ).fetchall()
    assert record == {
        "policy": pages.seeded.policy.name,
        "discarded_by": "alice",
        "note": "object kept on purpose",
        "same_death": True,
    }
    state = db.execute(
        "SELECT state FROM retention.operations WHERE operation_key = %s", (discarded,)
    ).fetchone()
    assert state == {"state": "dead"}, "a discard changes no operation"
    shown = client.get(answer.headers["location"])
    assert 'data-discarded-now="1"' in shown.text
    assert listed_operations(shown.text) == [kept]
    assert 'data-discarded-count="1"' in shown.text
    listed = client.get("/retention/ui/dead-letters?discarded=1")
    assert listed_operations(listed.text) == [discarded]
    assert 'data-discarded-by="alice"' in listed.text
    assert "object kept on purpose" in listed.text
    assert 'data-action="discard"' not in listed.text, "no discarding what is discarded"
    again = discard_post(client, [discarded])
    assert again.headers["location"].endswith("discarded_now=0"), "recorded once"
    # the way back: a replay of it (the stand-in records the run it would start)
    replayed = client.post(
        "/retention/ui/dead-letters/replay",
        data={"scope": "selected", "operation_key": [discarded], "reason": "changed our mind"},
        headers=ORIGIN,
    )
    assert replayed.status_code == 303, replayed.text
    assert pages.access.triggered[0][1]["operation_keys"] == [discarded]


@pytest.mark.parametrize(
    ("token", "headers", "refusal"),
    [
        ("viewer-token", ORIGIN, "(discarding dead letters needs the replay's right)"),
        ("admin-token", {"Origin": "http://evil.example"}, "This discard request did not come"),
        ("admin-token", {}, "This discard request did not come"),
    ],
    ids=["viewer", "other-origin", "no-origin"],
)
def test_a_discard_needs_the_replay_right_and_this_server_as_origin(
    pages: Pages, db: Connection, token: str, headers: dict[str, str], refusal: str
) -> None:
    client = pages.as_user(token)
    answer = client.post(
        "/retention/ui/dead-letters/discard",
        data={"operation_key": pages.seeded.dead_keys},
        headers=headers,
    )
    assert answer.status_code == 403
    assert refusal in unescape(answer.text)
    recorded = db.execute(
        "SELECT count(*) AS n FROM retention.discards WHERE policy = %s",
        (pages.seeded.policy.name,),
    ).fetchone()
    assert recorded == {"n": 0}


def test_discarding_a_policy_needs_the_right_to_trigger_its_dag(
    pages: Pages, db: Connection
) -> None:
    policy = pages.seeded.policy
    pages.access.untriggerable_dags.add(policy.dag_id)
    answer = discard_post(pages.as_user("admin-token"), pages.seeded.dead_keys)
    assert answer.status_code == 403
    assert f"discarding the dead letters of policy {policy.name!r}" in unescape(answer.text)
    assert db.execute(
        "SELECT count(*) AS n FROM retention.discards WHERE policy = %s", (policy.name,)
    ).fetchone() == {"n": 0}
    assert discard_post(pages.client, []).status_code in (400, 403)


def test_the_pages_offer_select_all_and_auto_refresh(pages: Pages) -> None:
    """The browser test clicks them; here: each page that lists something has them."""
    client = pages.as_user("admin-token")
    letters = client.get("/retention/ui/dead-letters").text
    assert 'data-select-all="operation_key"' in letters
    assert 'data-select-all="event_id"' in letters
    assert "data-refresh-toggle" in letters
    assert "data-refresh-toggle" in client.get("/retention/ui/").text
    key = pages.seeded.dead_keys[0]
    evidence = client.get(f"/retention/ui/operations/{key}").text
    assert "data-refresh-toggle" not in evidence, "only the lists reload themselves"


def test_the_overview_draws_the_last_24_hours(pages: Pages) -> None:
    """Deletions, 429s and queue age per minute over 24 hours, as inline SVG lines."""
    page = pages.as_user("viewer-token").get("/retention/ui/")
    name = pages.seeded.policy.name
    card = page.text[page.text.index(f'data-policy="{name}"') :]
    card = card[: card.index("</section>")]
    for chart in ("deletions", "rate_limited", "queue_age"):
        drawn = card[card.index(f'data-chart="{chart}"') :]
        drawn = drawn[: drawn.index("</figure>")]
        assert "last 24 h" in drawn
        (path,) = re.findall(r'<path d="([^"]+)"', drawn)
        assert path.startswith("M"), chart
    queue = card[card.index('data-chart="queue_age"') :]
    # the pending operations were created two hours ago; a minute is read at its start
    assert re.search(r"oldest (1 h 59|2 h 0) min", queue[: queue.index("</figure>")])
    deletions = card[card.index('data-chart="deletions"') :]
    assert f"peak {pages.seeded.done}/min" in deletions[: deletions.index("</figure>")]


def test_the_api_and_the_evidence_page_show_each_resource_of_an_object(
    db: Connection,
    test_dsn: str,
    unique_name: str,
    sandbox,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An object whose thumbnails answered 503: its record, as JSON and as the page, lists
    the object confirmed and the thumbnails pending, and says the row waits on them."""
    from tests.support.policies import remote_fields
    from tests.support.remote import enqueue_all, work
    from tests.support.tables import create_media_table

    thumbnails = {"name": "thumbnails", "endpoint": "/v1/assets/{object_id}/thumbnails"}
    remote = remote_fields(
        unique_name, derivatives=[thumbnails], backoff_base_seconds=60, backoff_max_seconds=60
    )
    fields = policy_fields(
        unique_name, window_rows=10_000, batch_rows=500, window_per_tenant=False, remote=remote
    )
    policy = make_policy(unique_name, **{k: v for k, v in fields.items() if k != "name"})
    create_media_table(db, unique_name, 1)
    sandbox.state.configure(fail_5xx={"obj-1/thumbnails": 1})
    enqueue_all(db, policy)
    work(test_dsn, policy, sandbox)
    key = db.execute(
        "SELECT operation_key FROM retention.operations WHERE policy = %s AND resource = 'object'",
        (policy.name,),
    ).fetchone()["operation_key"]  # type: ignore[index]
    policies = tmp_path / "policies.yaml"
    policies.write_text(yaml.safe_dump({"policies": {unique_name: fields}}))
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    access = StandInAccess(users=USERS, paused={policy.dag_id: False}, switch="all")
    root = FastAPI()
    root.mount(
        "/retention",
        create_app(airflow_auth=False, authorize=access.may_read, ui_access=access),
    )
    with TestClient(root, base_url=BASE, follow_redirects=False) as client:
        client.cookies.set("_token", "viewer-token")
        record = client.get(f"/retention/operations/{key}").json()
        page = unescape(client.get(f"/retention/ui/operations/{key}").text)
    states = {r["name"]: r["state"] for r in record["resources"]}
    assert states == {"object": "done", "thumbnails": "pending"}
    assert record["row"] == {"all_resources_confirmed": False, "waiting_on": ["thumbnails"]}
    assert "Resources of the object" in page
    assert "it waits on thumbnails" in page
    assert re.search(r"<td>thumbnails</td><td><span class=\"status\">pending</span>", page)


def test_a_run_airflow_will_not_start_before_its_future_date_is_named_with_the_fix(
    pages: Pages,
) -> None:
    """Airflow leaves such a run "running" with every task "No Status"; the lease tile alone
    said "no run is working now"."""
    now = dt.datetime.now(dt.UTC)
    dag_id = pages.seeded.policy.dag_id
    ahead = (now + dt.timedelta(days=21)).replace(hour=0, minute=0, second=0, microsecond=0)
    pages.access.runs = [
        FutureRun(dag_id, "manual__typo", ahead, "running"),
        FutureRun("retention__other", "manual__elsewhere", ahead, "running"),
    ]
    page = pages.as_user("viewer-token").get("/retention/ui/")
    name = pages.seeded.policy.name
    section = unescape(page.text[page.text.index(f'data-policy="{name}"') :])
    notes = re.findall(r'data-figure="future_run">([^<]*)<', section)
    assert len(notes) == 1, notes
    text = " ".join(notes[0].split())
    assert text.startswith(f"run manual__typo has the logical date {ahead:%Y-%m-%d} (")
    assert "days ahead): Airflow starts none of its tasks before then" in text
    assert '"Logical date is in future"' in text
    assert "Mark run manual__typo failed" in text
    assert "later runs go on" in text
    assert "manual__elsewhere" not in section


def test_a_future_dated_erasure_or_replay_run_is_named_with_the_fix(pages: Pages) -> None:
    """The erasure DAG works one pass at a time, so such a run stops every erasure: the
    overview names it; a replay run of that kind replays nothing: the dead-letters page,
    where replays start, names it. Each with its date and the fix."""
    now = dt.datetime.now(dt.UTC)
    ahead = (now + dt.timedelta(days=21)).replace(hour=0, minute=0, second=0, microsecond=0)
    pages.access.runs = [
        FutureRun(ERASURE_DAG_ID, "manual__erase_typo", ahead, "running"),
        FutureRun(REPLAY_DAG_ID, "manual__replay_typo", ahead, "queued"),
    ]

    def notes(path: str, figure: str) -> list[str]:
        page = pages.as_user("viewer-token").get(path)
        assert page.status_code == 200
        found = re.findall(rf'data-figure="{figure}">(.*?)</p>', unescape(page.text), re.S)
        return [" ".join(re.sub(r"<[^>]+>", "", note).split()) for note in found]

    [erasure] = notes("/retention/ui/", "erasure_future_run")
    assert erasure.startswith(
        f"{ERASURE_DAG_ID} run manual__erase_typo has the logical date {ahead:%Y-%m-%d} ("
    )
    assert "Mark run manual__erase_typo failed" in erasure
    assert "no erasure is worked" in erasure
    assert "manual__replay_typo" not in " ".join(notes("/retention/ui/", "erasure_future_run"))
    [replay] = notes("/retention/ui/dead-letters", "replay_future_run")
    assert replay.startswith(
        f"{REPLAY_DAG_ID} run manual__replay_typo has the logical date {ahead:%Y-%m-%d} ("
    )
    assert "Mark run manual__replay_typo failed" in replay
    assert "It replays nothing until then" in replay
    pages.access.unreadable_dags = {ERASURE_DAG_ID}
    assert notes("/retention/ui/", "erasure_future_run") == [], "only for who may read it"
    pages.access.unreadable_dags = {REPLAY_DAG_ID}
    assert notes("/retention/ui/dead-letters", "replay_future_run") == [], "the same"


def test_the_limiter_tile_says_when_the_last_run_ignored_rate_limit_headers(
    pages: Pages, db: Connection
) -> None:
    name = pages.seeded.policy.name

    def tile() -> list[str]:
        page = pages.as_user("viewer-token").get("/retention/ui/")
        section = page.text[page.text.index(f'data-policy="{name}"') :]
        return re.findall(r'data-figure="rate_limit_headers">([^<]*)<', section)

    assert tile() == []
    note = rate_limit_headers_note("X-RateLimit-Remaining 50 is more than X-RateLimit-Limit 40")
    db.execute(
        "UPDATE retention.runs SET summary = summary || jsonb_build_object("
        "'rate_limit_headers_note', %s::text) WHERE policy = %s AND run_id = %s",
        (note, name, pages.seeded.run_id),
    )
    assert tile() == [note]


def test_the_evidence_page_shows_each_tables_rows_waiting_with_the_row(
    pages: Pages, db: Connection, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy with children: the page counts the rows of the policy's table and of each
    listed child still there for the object's row key, as explain does."""
    name = f"{unique_name}_family"
    fields = remote_family(db, name)
    policy, problems = parse_policy(name, fields)
    assert policy is not None, problems
    enqueue_all(db, policy)
    (match,) = find_operations(db, "obj-1", policy=name, limit=2)
    policies = tmp_path / "family.yaml"
    policies.write_text(yaml.safe_dump({"policies": {name: fields}}))
    monkeypatch.setenv("RETENTION_POLICIES", str(policies))
    page = pages.as_user("viewer-token").get(f"/retention/ui/operations/{match['operation_key']}")
    assert page.status_code == 200
    text = unescape(page.text)
    assert "Tables of the row" in text
    assert "still there for row 1, waiting with the row" in text
    rows = re.findall(r"<tr><td>([^<]+)</td><td class=\"num\">([^<]+)</td></tr>", text)
    assert rows == [(f"public.{name}", "1"), (f"public.{name}_r", "3")]
