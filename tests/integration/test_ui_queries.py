"""The Retention view's figures, read from the real Postgres, match what was seeded."""

from __future__ import annotations

import datetime as dt

from devtools.plans import CUTOFF
from retention.db.connection import Connection
from retention.evidence.reconcile import reconcile_run
from retention.rows.deleter import delete_window
from retention.runs.lease import release_run_lease, take_run_lease
from retention.ui.queries import (
    DeadLetterFilter,
    Minute,
    dead_event_ids_by_policy,
    dead_events,
    dead_keys_by_policy,
    dead_letter_classes,
    dead_letters,
    policy_figures,
)
from tests.support.policies import make_policy, remote_policy
from tests.support.tables import create_media_table, create_table, new, old, plan
from tests.support.ui_seed import NOTIFY, OLD_429S, PENDING_AGE, RECENT_429S, seed_remote_ledger


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def test_a_remote_policy_shows_its_run_backlog_rates_and_events(
    db: Connection, test_dsn: str, unique_name: str, sandbox
) -> None:
    seeded = seed_remote_ledger(db, test_dsn, remote_policy(unique_name, notify=NOTIFY), sandbox)
    policy = seeded.policy
    figures = policy_figures(db, policy, now())

    run = db.execute(
        "SELECT * FROM retention.runs WHERE policy = %s AND run_id = 'run-1'", (policy.name,)
    ).fetchone()
    assert figures.last_run is not None
    assert (figures.last_run.run_id, figures.last_run.status) == ("run-1", run["status"])
    assert figures.last_run.cutoff == CUTOFF
    plan_windows = db.execute(
        "SELECT count(*) AS n FROM retention.windows WHERE policy = %s AND run_id = 'run-1'",
        (policy.name,),
    ).fetchone()
    assert sum(figures.last_run.windows.values()) == plan_windows["n"]  # not run-0's
    assert figures.last_run.rows_deleted == run["rows_deleted"]
    # the rows of confirmed objects are gone; the dead and the held ones remain
    assert figures.last_run.rows_remaining == run["rows_remaining"] == 4
    assert figures.last_run.duration_seconds == (
        (run["finished_at"] - run["planned_at"]).total_seconds()
    )
    assert figures.operations == {"pending": seeded.pending, "dead": len(seeded.dead_keys)}
    assert figures.oldest_pending_seconds is not None
    assert PENDING_AGE.total_seconds() <= figures.oldest_pending_seconds
    assert figures.oldest_pending_seconds < PENDING_AGE.total_seconds() + 300
    assert figures.deletions_last_hour == seeded.done
    assert figures.deletions_per_minute == seeded.done / 60
    assert len(figures.minutes) == 60
    assert figures.rate_limited_last_hour == RECENT_429S  # not the one two hours ago
    assert OLD_429S > 0
    assert figures.events == {"pending": seeded.events_pending, "dead": seeded.events_dead}
    assert figures.effective_rate == 0  # closed by the 429 storm until its Retry-After
    assert figures.rate_ceiling == policy.remote.rate_per_second
    assert figures.limiter_closed_until is not None
    assert figures.limiter_closed_until > now() + dt.timedelta(minutes=5)
    # the table's rows are two days older than CUTOFF, long before now − retain_days
    assert figures.oldest_eligible == CUTOFF - dt.timedelta(days=2)
    expected_lag = figures.cutoff_now - (CUTOFF - dt.timedelta(days=2))
    assert figures.lag_seconds == expected_lag.total_seconds()


def test_an_open_limiter_shows_its_recovering_rate(
    db: Connection, test_dsn: str, unique_name: str, sandbox
) -> None:
    seeded = seed_remote_ledger(
        db, test_dsn, remote_policy(unique_name, notify=NOTIFY), sandbox, close_limiter=False
    )
    remote = seeded.policy.remote
    assert remote is not None
    db.execute(
        "UPDATE retention.rate_limiters SET effective_rate = %s, updated_at = clock_timestamp() "
        "WHERE scope = %s",
        (remote.rate_per_second / 4, remote.scope),
    )
    figures = policy_figures(db, seeded.policy, now())
    assert figures.limiter_closed_until is None
    assert figures.effective_rate is not None
    assert remote.rate_per_second / 4 <= figures.effective_rate < remote.rate_per_second


def test_a_clean_row_policy_has_no_lag_and_counts_its_deleted_rows(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(i, 1, old() if i <= 30 else new()) for i in range(1, 41)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5, retain_days=3650)
    for window in plan(db, policy):
        delete_window(db, policy, window, batch_rows=5, dry_run=False)
    take_run_lease(db, policy.name, policy.dag_id, "run-1", lambda run_id: "running")
    during = policy_figures(db, policy, now())
    assert during.last_run is not None
    assert (during.last_run.status, during.last_run.rows_deleted) == ("planned", None)
    assert during.last_run.rows_deleted_so_far == 30, "progress before reconcile"
    assert during.last_run.lease_holder == "run-1"
    assert during.last_run.lease_taken_at is not None
    reconcile_run(db, policy, "run-1")
    release_run_lease(db, policy.name, "run-1")
    figures = policy_figures(db, policy, now())
    assert figures.last_run is not None
    assert (figures.last_run.status, figures.last_run.rows_deleted) == ("clean", 30)
    assert figures.last_run.lease_holder is None
    windows = db.execute(
        "SELECT state, count(*) AS n FROM retention.windows WHERE policy = %s GROUP BY state",
        (policy.name,),
    ).fetchall()
    assert figures.last_run.windows == {w["state"]: w["n"] for w in windows}
    assert sum(figures.last_run.windows.values()) == 3  # 30 rows, window_rows 10
    assert figures.last_run.rows_remaining == 0
    assert figures.deletions_last_hour == 30
    assert figures.rate_limited_last_hour == 0
    # retain_days 3650: nothing in the table is older than now − 10 years
    assert (figures.oldest_eligible, figures.lag_seconds) == (None, None)
    assert figures.operations == {}
    assert figures.oldest_pending_seconds is None
    assert figures.effective_rate is None


def test_a_policy_without_runs_has_no_last_run(db: Connection, unique_name: str) -> None:
    create_media_table(db, unique_name, 3)
    figures = policy_figures(db, make_policy(unique_name), now())
    assert figures.last_run is None
    assert figures.oldest_eligible == CUTOFF - dt.timedelta(days=2)


def test_dead_letters_filter_by_policy_class_and_time(
    db: Connection, test_dsn: str, unique_name: str, sandbox
) -> None:
    seeded = seed_remote_ledger(db, test_dsn, remote_policy(unique_name, notify=NOTIFY), sandbox)
    name = seeded.policy.name
    everything = dead_letters(db, [name], DeadLetterFilter())
    assert sorted(r["operation_key"] for r in everything) == seeded.dead_keys
    assert {r["failure_class"] for r in everything} == {"http_422"}
    assert {r["object_id"] for r in everything} == {"obj-1", "obj-2"}
    assert dead_letters(db, [name], DeadLetterFilter(failure_class="max_attempts")) == []
    assert dead_letters(db, ["another_policy"], DeadLetterFilter()) == []
    later = now() + dt.timedelta(minutes=1)
    assert dead_letters(db, [name], DeadLetterFilter(name, "http_422", since=later)) == []
    earlier = now() - dt.timedelta(hours=1)
    assert len(dead_letters(db, [name], DeadLetterFilter(name, "http_422", since=earlier))) == 2
    assert len(dead_letters(db, [name], DeadLetterFilter(), limit=1)) == 1
    assert dead_letter_classes(db, [name]) == [
        {"kind": "operations", "policy": name, "failure_class": "http_422", "n": 2},
        {"kind": "events", "policy": name, "failure_class": "http_410", "n": 1},
    ]
    done = db.execute(
        "SELECT operation_key FROM retention.operations WHERE policy = %s AND state = 'done' "
        "LIMIT 1",
        (name,),
    ).fetchone()
    chosen = [*seeded.dead_keys, done["operation_key"]]
    assert dead_keys_by_policy(db, chosen, [name]) == {name: seeded.dead_keys}
    assert dead_keys_by_policy(db, chosen, ["another_policy"]) == {}


def test_dead_events_are_listed_and_grouped_by_policy(
    db: Connection, test_dsn: str, unique_name: str, sandbox
) -> None:
    seeded = seed_remote_ledger(db, test_dsn, remote_policy(unique_name, notify=NOTIFY), sandbox)
    name = seeded.policy.name
    (event,) = dead_events(db, [name], DeadLetterFilter())
    stored = db.execute(
        "SELECT event_id, operation_key FROM retention.outbox WHERE state = 'dead' AND policy = %s",
        (name,),
    ).fetchone()
    assert (event["event_id"], event["operation_key"]) == (
        stored["event_id"],
        stored["operation_key"],
    )
    assert event["failure_class"] == "http_410"
    assert dead_events(db, [name], DeadLetterFilter(failure_class="http_422")) == []
    assert dead_events(db, ["another_policy"], DeadLetterFilter()) == []
    pending = db.execute(
        "SELECT event_id FROM retention.outbox WHERE state = 'pending' AND policy = %s LIMIT 1",
        (name,),
    ).fetchone()
    chosen = [event["event_id"], pending["event_id"]]
    assert dead_event_ids_by_policy(db, chosen, [name]) == {name: [event["event_id"]]}


def test_the_last_24_hours_per_minute_with_the_queue_age_then(
    db: Connection, test_dsn: str, unique_name: str, sandbox
) -> None:
    """Queue age at a minute is the age then of the oldest operation created by then and
    not yet done or dead by then, rebuilt from the ledger (there is no history table)."""
    seeded = seed_remote_ledger(db, test_dsn, remote_policy(unique_name, notify=NOTIFY), sandbox)
    name = seeded.policy.name
    # one more operation: created 10 hours ago, done 5 hours ago, so the oldest waiting
    # one from 10 h ago until 5 h ago (the held ones were created 2 hours ago)
    done = db.execute(
        "SELECT operation_key FROM retention.operations WHERE policy = %s AND state = 'done' "
        "ORDER BY operation_key LIMIT 1",
        (name,),
    ).fetchone()
    db.execute(
        "UPDATE retention.operations SET created_at = now() - interval '10 hours', "
        "done_at = now() - interval '5 hours' WHERE operation_key = %s",
        (done["operation_key"],),
    )
    figures = policy_figures(db, seeded.policy, now())
    assert len(figures.day) == 24 * 60
    assert figures.minutes == [
        Minute(m.minute, m.deletions, m.rate_limited) for m in figures.day[-60:]
    ], "the hour's figures are the day's last hour"
    assert sum(m.deletions for m in figures.day) == seeded.done  # one moved 5 hours back
    assert figures.deletions_last_hour == seeded.done - 1
    assert sum(m.rate_limited for m in figures.day) == RECENT_429S + OLD_429S

    def age_at(hours_ago: float) -> float | None:
        return figures.day[-1 - int(hours_ago * 60)].queue_age_seconds

    assert age_at(11) is None, "nothing waited 11 hours ago"
    assert 3 * 3600 - 60 <= age_at(7) <= 3 * 3600 + 60  # the 10-hour-old one, 3 hours in
    assert age_at(3) is None, "done 5 h ago; the held ones were created 2 h ago"
    assert PENDING_AGE.total_seconds() - 60 <= age_at(0) <= PENDING_AGE.total_seconds()


def test_24_hours_too_slow_to_read_lose_the_charts_not_the_figures(
    db: Connection, unique_name: str, monkeypatch
) -> None:
    """A ledger too large to read a day of it within the statement timeout: the card
    keeps its figures (the hour is read apart) and says why it has no charts."""
    from retention.ui import queries

    create_media_table(db, unique_name, 3)
    real = queries.query

    def slow_day(name: str, **parts):
        return "SELECT pg_sleep(5)" if name == "ui_day_per_minute" else real(name, **parts)

    monkeypatch.setattr(queries, "query", slow_day)
    monkeypatch.setattr(queries, "STATEMENT_MS", 500)
    figures = policy_figures(db, make_policy(unique_name), now())
    assert figures.day == []
    assert figures.day_error == "not read: canceling statement due to statement timeout"
    assert len(figures.minutes) == 60
    assert figures.oldest_eligible == CUTOFF - dt.timedelta(days=2)


def test_a_last_run_that_found_its_rows_deleted_by_another_says_which(
    db: Connection, unique_name: str
) -> None:
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 11)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5, retain_days=3650)
    later = CUTOFF + dt.timedelta(days=1)
    ten_years = dt.timedelta(days=3650)
    for window in plan(
        db, policy, run_id="run-later", cutoff=later, logical_date=later + ten_years
    ):
        delete_window(db, policy, window, batch_rows=5, dry_run=False)
    reconcile_run(db, policy, "run-later")
    plan(db, policy, run_id="run-earlier")
    reconcile_run(db, policy, "run-earlier")
    figures = policy_figures(db, policy, now())
    # the latest run by logical date is the later date's; the one that finished last is
    # the older date's, which found its rows gone and says who deleted them
    assert figures.last_run is not None
    assert figures.last_run.run_id == "run-later"
    assert figures.last_run.covered_note is None
    assert figures.last_finished is not None
    assert figures.last_finished.run_id == "run-earlier"
    assert figures.last_finished.rows_deleted == 0
    assert figures.last_finished.covered_note == (
        f"nothing older than 2026-03-01 was left: run {later + ten_years:%Y-%m-%d} deleted it"
    )
