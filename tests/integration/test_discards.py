"""Dead operations reviewed and discarded (``retention.discards``): explained, with the
evidence kept, wherever the ledger's dead letters are counted (the alerts' "new dead
letters", reconcile's explanation of the rows that remain), and undone only by a replay."""

from __future__ import annotations

import datetime as dt

from retention.alerts.delivery import read_run_facts
from retention.db.connection import Connection
from retention.evidence.discard import discard_dead
from retention.evidence.reconcile import reconcile_run
from retention.evidence.replay import replay_dead
from tests.support.policies import remote_policy
from tests.support.ui_seed import HELD, NOTIFY, SeededLedger, seed_remote_ledger


def seeded(
    db: Connection, test_dsn: str, name: str, sandbox, *, notify: bool = True
) -> SeededLedger:
    policy = remote_policy(name, notify=NOTIFY if notify else None)
    return seed_remote_ledger(db, test_dsn, policy, sandbox)


def discard(db: Connection, seeded: SeededLedger, keys: list[str]) -> list[str]:
    rows = discard_dead(
        db,
        operation_keys=keys,
        policies=[seeded.policy.name],
        discarded_by="alice",
        note="kept on purpose",
    )
    return [row["operation_key"] for row in rows]


def test_a_discarded_dead_letter_is_not_a_new_one_for_the_alerts(
    db: Connection, test_dsn: str, unique_name: str, sandbox
) -> None:
    ledger = seeded(db, test_dsn, unique_name, sandbox)

    def dead() -> tuple[int, dict[str, int], int]:
        facts = read_run_facts(
            db,
            ledger.policy,
            ledger.run_id,
            failed_tasks=(),
            dry_run=False,
            url=None,
            now=dt.datetime.now(dt.UTC),
        )
        return (
            facts.dead.new_operations,
            facts.dead.new_operations_by_class,
            facts.dead.dead_operations,
        )

    assert dead() == (2, {"http_422": 2}, 2)
    assert discard(db, ledger, ledger.dead_keys[:1]) == ledger.dead_keys[:1]
    assert dead() == (1, {"http_422": 1}, 2), "still dead in all: nothing is hidden"
    assert discard(db, ledger, ledger.dead_keys[:1]) == [], "recorded once per dead episode"


def test_reconcile_counts_discarded_rows_as_explained_and_not_overdue(
    db: Connection, test_dsn: str, unique_name: str, sandbox
) -> None:
    """Rows whose dead operations were discarded stay in the table (their objects were
    not deleted): reconcile shows them as ``discarded`` and does not hold them against
    max_lag_hours, since nobody will work on them; the run is backlog, not clean."""
    ledger = seeded(db, test_dsn, unique_name, sandbox, notify=False)  # no event to deliver
    policy = ledger.policy.model_copy(update={"max_lag_hours": 1})
    # the seed's window is left running; here it finished, leaving only the dead
    # operations' rows older than the cutoff
    db.execute("UPDATE retention.windows SET state = 'done' WHERE policy = %s", (policy.name,))
    db.execute(
        f"DELETE FROM public.{unique_name} WHERE object_key = ANY(%s)",  # noqa: S608
        (list(HELD),),
    )
    before = reconcile_run(db, policy, ledger.run_id)
    assert before["remote"]["eligible_rows_by_state"] == {"dead": 2}
    assert before["status"] == "dirty", "dead rows days past their cutoff are overdue"
    discard(db, ledger, ledger.dead_keys[:1])
    half = reconcile_run(db, policy, ledger.run_id)
    assert half["remote"]["eligible_rows_by_state"] == {"dead": 1, "discarded": 1}
    assert half["status"] == "dirty", "the other dead row is still overdue"
    discard(db, ledger, ledger.dead_keys)
    after = reconcile_run(db, policy, ledger.run_id)
    assert after["remote"]["eligible_rows_by_state"] == {"discarded": 2}
    assert after["remote"]["unexplained_rows"] == 0
    assert after["remote"]["oldest_overdue_hours"] is None
    assert after["rows_remaining"] == 2
    assert after["status"] == "backlog"


def test_a_replay_is_the_recorded_way_back_and_a_new_death_is_a_new_dead_letter(
    db: Connection, test_dsn: str, unique_name: str, sandbox
) -> None:
    ledger = seeded(db, test_dsn, unique_name, sandbox)
    key = ledger.dead_keys[0]
    discard(db, ledger, [key])
    replay_dead(
        db, policy=ledger.policy.name, operation_keys=[key], requested_by="bob", reason="undo"
    )
    assert discard(db, ledger, [key]) == [], "not dead: nothing to discard"
    db.execute(
        "UPDATE retention.operations SET state = 'dead', updated_at = clock_timestamp() "
        "WHERE operation_key = %s",
        (key,),
    )
    assert discard(db, ledger, [key]) == [key], "dead again: a new episode to review"
    history = db.execute(
        "SELECT discarded_by, note FROM retention.discards WHERE operation_key = %s "
        "ORDER BY discard_id",
        (key,),
    ).fetchall()
    assert len(history) == 2, "the first discard is kept as history"
    replays = db.execute(
        "SELECT requested_by, reason FROM retention.replays WHERE %s = ANY(operation_keys)",
        (key,),
    ).fetchall()
    assert replays == [{"requested_by": "bob", "reason": "undo"}]


def test_an_old_discard_is_purged_only_once_it_explains_nothing(
    db: Connection, test_dsn: str, unique_name: str, sandbox
) -> None:
    from retention.evidence.audit import purge_audit

    ledger = seeded(db, test_dsn, unique_name, sandbox, notify=False)
    still_dead, replayed = ledger.dead_keys
    discard(db, ledger, ledger.dead_keys)
    replay_dead(db, policy=ledger.policy.name, operation_keys=[replayed], requested_by="bob")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=400)
    purged = purge_audit(db, ledger.policy.name, audit_days=30, now=later)
    assert purged["discards"] == 1
    left = db.execute(
        "SELECT operation_key FROM retention.discards WHERE policy = %s", (ledger.policy.name,)
    ).fetchall()
    assert left == [{"operation_key": still_dead}], "it still explains a dead operation"


def test_two_discards_of_one_dead_letter_at_once_record_it_once(
    db: Connection, test_dsn: str, unique_name: str, sandbox
) -> None:
    """The first discard is not committed yet when the second runs: the second waits on
    the unique index and records nothing, where it used to pass the NOT EXISTS check."""
    import threading

    from retention.db.connection import connect_dsn

    ledger = seeded(db, test_dsn, unique_name, sandbox)
    key = ledger.dead_keys[0]
    second: list[list[str]] = []
    with connect_dsn(test_dsn) as first:
        first.autocommit = False
        recorded = discard(first, ledger, [key])

        def discard_again() -> None:
            with connect_dsn(test_dsn) as other:
                second.append(discard(other, ledger, [key]))

        racer = threading.Thread(target=discard_again)
        racer.start()
        racer.join(1.0)
        assert racer.is_alive(), "the second discard waits for the first to commit"
        first.commit()
        racer.join(10)
    assert recorded == [key]
    assert second == [[]], "recorded once"
    rows = db.execute(
        "SELECT count(*) AS n FROM retention.discards WHERE operation_key = %s", (key,)
    ).fetchone()
    assert rows == {"n": 1}
