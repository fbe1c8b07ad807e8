"""Progress lines from real window runs: a line per interval and a last line with true numbers."""

from __future__ import annotations

import logging
import re

import pytest

from devtools.plans import request
from retention.db.connection import Connection
from retention.objects.deleter import ObjectDeleter
from retention.objects.kind import OperationsKind
from retention.progress import PROGRESS_SECONDS_VARIABLE, rate
from retention.rows.deleter import delete_window
from retention.rows.planner import plan_windows
from tests.support.policies import make_policy, remote_policy
from tests.support.remote import sandbox_sender
from tests.support.tables import create_media_table, create_table, ids_left, old, plan

PROGRESS = re.compile(
    r"^(?P<label>.+?): done (?P<done>[\d,]+) of (?P<of>~?[\d,]+) (?P<unit>\w+) "
    r"\((?P<share>\d+)%\), (?P<rate>[\d.,]+) (?P=unit)/s, (?P<eta>ETA [^,]+), (?P<throttled>.+)$"
)


def lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


def progress_lines(messages: list[str]) -> list[dict[str, str]]:
    """Each message parsed as a progress line (fails on one that is not)."""
    parsed = []
    for message in messages:
        match = PROGRESS.match(message)
        assert match is not None, f"not a progress line: {message}"
        parsed.append(match.groupdict())
    return parsed


def test_a_row_window_logs_progress_and_a_true_last_line(
    db: Connection,
    unique_name: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PROGRESS_SECONDS_VARIABLE, "0.000001")  # a line after every batch
    caplog.set_level(logging.INFO, logger="retention")
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 41)])
    policy = make_policy(
        unique_name,
        window_rows=100,
        batch_rows=10,
        health={"sleep_ratio": 0.5, "busy_sleep_ratio": 0},
    )
    (window,) = plan_windows(db, request(policy))
    assert window.expected_rows == 40
    slept: list[float] = []
    result = delete_window(db, policy, window, batch_rows=10, dry_run=False, sleep=slept.append)
    assert ids_left(db, unique_name) == []

    progress = progress_lines(lines(caplog, "retention.rows.deleter"))
    assert len(progress) == result.batches >= 4, "one line per batch at this interval"
    done = [int(line["done"].replace(",", "")) for line in progress]
    assert done == sorted(done)
    assert done[-1] == 40
    first = {k: progress[0][k] for k in ("label", "done", "of", "unit", "share")}
    assert first == {
        "label": window.label,
        "done": "10",
        "of": "~40",
        "unit": "rows",
        "share": "25",
    }
    assert progress[0]["eta"].startswith("ETA ")
    assert progress[-1]["eta"] == "ETA now"
    assert progress[-1]["throttled"].startswith("throttled ")
    assert "(paced " in progress[-1]["throttled"]

    (last,) = [line for line in lines(caplog, "retention.rows.lifecycle") if "deleted" in line]
    assert last.startswith(f"{window.label}: deleted 40 of ~40 rows (100%) in ")
    assert f", {rate(40 / result.seconds, 'rows')}, " in last
    assert f", {result.batches} batches, " in last
    assert last.endswith(", 0 timeouts")
    paced = re.search(r"\(paced ([\d.]+) (ms|s)\)", last)
    assert paced is not None, last
    shown, tolerance = (
        (float(paced[1]) / 1000, 0.001) if paced[2] == "ms" else (float(paced[1]), 0.05)
    )
    assert abs(shown - sum(slept)) <= tolerance, "the time paced is the time slept"


def test_no_progress_line_before_the_interval_only_the_last_one(
    db: Connection,
    unique_name: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PROGRESS_SECONDS_VARIABLE, "3600")
    caplog.set_level(logging.INFO, logger="retention")
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 41)])
    policy = make_policy(unique_name, window_rows=100, batch_rows=10)
    (window,) = plan_windows(db, request(policy))
    result = delete_window(db, policy, window, batch_rows=10, dry_run=False)
    assert result.batches >= 4
    assert lines(caplog, "retention.rows.deleter") == []
    (last,) = lines(caplog, "retention.rows.lifecycle")
    assert last.startswith(f"{window.label}: deleted 40 of ~40 rows (100%) in ")
    assert "not throttled" in last


def test_a_dry_run_window_says_counted(
    db: Connection, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention")
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, 11)])
    policy = make_policy(unique_name, window_rows=100)
    (window,) = plan_windows(db, request(policy))
    delete_window(db, policy, window, batch_rows=10, dry_run=True)
    (last,) = lines(caplog, "retention.rows.lifecycle")
    assert last.startswith(f"{window.label}: counted 10 of ~10 rows (100%) in ")
    assert len(ids_left(db, unique_name)) == 10


def test_a_remote_window_logs_operations_done_of_expected(
    db: Connection,
    unique_name: str,
    sandbox,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PROGRESS_SECONDS_VARIABLE, "0.000001")
    caplog.set_level(logging.INFO, logger="retention")
    create_media_table(db, unique_name, 30, new_rows=5)
    policy = remote_policy(unique_name, claim_batch=10)
    (window,) = plan(db, policy)
    deleter = ObjectDeleter(
        policy.table_spec,
        policy.timeouts,
        policy=policy,
        open_kind=lambda: OperationsKind(policy, sandbox_sender(sandbox)),
    )
    result = deleter.run(db, window, batch_rows=100, dry_run=False)
    assert result.rows_deleted == 30
    messages = lines(caplog, "retention.objects.deleter")
    progress = progress_lines(messages[:-1])
    assert progress, "a line after each claimed batch at this interval"
    assert {line["of"] for line in progress} == {"30"}
    assert {line["unit"] for line in progress} == {"operations"}
    assert progress[-1]["done"] == "30"
    last = messages[-1]
    assert last.startswith(f"{window.label}: done 30 of 30 operations (100%) in ")
    assert "30 rows deleted" in last
    assert "answers 204 ×30" in last


THROTTLED = re.compile(r"(not throttled|throttled [^()]+ \([^)]*\))")


def test_a_remote_window_and_its_worker_report_the_same_throttled_time(
    db: Connection,
    unique_name: str,
    sandbox,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's last line said "throttled 22 s (rate_limit 22 s)" and the window's, just
    after it, "not throttled": both count the wait for the API's rate limit."""
    monkeypatch.setenv(PROGRESS_SECONDS_VARIABLE, "3600")  # only the last lines
    caplog.set_level(logging.INFO, logger="retention")
    create_media_table(db, unique_name, 12)
    policy = remote_policy(unique_name, rate_per_second=25, burst=1, claim_batch=4)
    (window,) = plan(db, policy)
    deleter = ObjectDeleter(
        policy.table_spec,
        policy.timeouts,
        policy=policy,
        open_kind=lambda: OperationsKind(policy, sandbox_sender(sandbox)),
    )
    result = deleter.run(db, window, batch_rows=100, dry_run=False)
    assert result.rows_deleted == 12
    (worker,) = [m for m in lines(caplog, "retention.objects.deleter") if " in " in m]
    (closing,) = [m for m in lines(caplog, "retention.rows.lifecycle") if "deleted" in m]
    said = [THROTTLED.search(line) for line in (worker, closing)]
    assert all(said), (worker, closing)
    words = [match.group(1) for match in said if match]
    assert words[0].startswith("throttled "), worker
    assert "(rate_limit " in words[0], worker
    assert words[1] == words[0], "the window's last line counts the worker's throttled time"


def test_a_dead_operation_is_logged_with_its_object_and_row(
    db: Connection, unique_name: str, sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    """A dead operation's line names what an operator looks for (the object and the row),
    not only the 64-character key."""
    caplog.set_level(logging.INFO, logger="retention")
    create_media_table(db, unique_name, 5)
    sandbox.state.configure(reject=["obj-3"])
    policy = remote_policy(unique_name)
    (window,) = plan(db, policy)
    deleter = ObjectDeleter(
        policy.table_spec,
        policy.timeouts,
        policy=policy,
        open_kind=lambda: OperationsKind(policy, sandbox_sender(sandbox)),
    )
    deleter.run(db, window, batch_rows=100, dry_run=False)
    key = db.execute(
        "SELECT operation_key FROM retention.operations WHERE policy = %s AND state = 'dead'",
        (unique_name,),
    ).fetchone()
    assert key is not None
    (dead,) = [m for m in lines(caplog, "retention.queue.worker") if " dead: " in m]
    assert dead.endswith(f"(object 'obj-3', row 3, key {key['operation_key']})"), dead


def test_the_planner_closes_with_each_step_and_its_time(
    db: Connection, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="retention.rows.planner")
    create_table(db, unique_name, [(i, 1 + i % 3, old()) for i in range(1, 41)])
    policy = make_policy(unique_name, window_rows=10, batch_rows=5, window_per_tenant=True)
    windows = plan_windows(db, request(policy))
    records = [r for r in caplog.records if r.name == "retention.rows.planner"]
    closing = [r.getMessage() for r in records if r.levelno == logging.INFO]
    # one line at INFO, after a step's own line only for a step of 1 s or more (a loaded
    # machine can make one that slow even here)
    assert all(" took " in line for line in closing[:-1]), closing
    pattern = (
        rf"^policy {unique_name} plan: {len(windows)} windows, ~[\d,]+ rows, planned in [\d.]+ m?s "
        r"\(table check [\d.]+ m?s, tenants [\d.]+ m?s, key range probes [\d.]+ m?s, "
        r"tenant probes [\d.]+ m?s, histogram [\d.]+ m?s, cutting windows [\d.]+ m?s, "
        r"recording [\d.]+ m?s\)$"
    )
    assert re.match(pattern, closing[-1]), closing[-1]
    steps = [
        r.getMessage() for r in records if r.levelno == logging.DEBUG or " took " in r.getMessage()
    ]
    assert f"policy {unique_name} plan: tenants took" in steps[1]
    assert steps[1].endswith(": 3 window groups")
    assert steps[2].endswith(": ids 1–40, ~40 rows")
    assert steps[3].endswith(": 3 of 3 with eligible rows")
