"""The run summary as an aligned table (pure): order, alignment, nesting, unknown keys."""

from __future__ import annotations

import datetime as dt
from typing import Any

from retention.evidence.report import format_summary


def summary() -> dict[str, Any]:
    """A dirty remote run with events, shaped as ``reconcile_run`` builds it."""
    return {
        "policy": "media",
        "dag_id": "retention__media",
        "run_id": "manual__2026-11-30T12:00:00+00:00",
        "plan_id": "manual__2026-11-30T12:00:00+00:00@0123456789ab",
        "table": "public.media",
        "status": "dirty",
        "dry_run": False,
        "cutoff": "2026-10-31T12:00:00+00:00",
        "anchor_source": "logical_date",
        "logical_date": None,
        "windows": 80,
        "windows_unfinished": ["media:p:w0003"],
        "windows_failed": [],
        "rows_planned": 580000,
        "rows_planned_is_estimate": True,
        "rows_deleted": 11111,
        "rows_counted": None,
        "rows_remaining": 12,
        "rows_remaining_in_windows": 12,
        "rows_outside_windows": 0,
        "dirty_windows": [
            {"window_key": "media:p:w0003", "label": "tenant 7 · ids 1–99", "rows_remaining": 12}
        ],
        "plan_seconds": 0.25,
        "delete_seconds": 1234.5,
        "longest_batch_ms": 53.0,
        "reconcile_seconds": 0.0421,
        "plan_notes": [],
        "partitions": [],
        "pauses": 2,
        "paused_seconds": 3.5,
        "pause_reasons": {"paced": 1.5, "replica_lag": 2.0},
        "remote": {
            "eligible_rows_by_state": {"pending": 10, "dead": 2},
            "unexplained_rows": 0,
            "oldest_overdue_hours": 1.25,
            "attempts_by_outcome": {"confirmed": 900, "rate_limited": 4},
            "rate_limited_responses": 4,
            "lease_expiries": 0,
            "dead_total": 2,
            "ledger_backlog": {},
            "effective_rate": 7.5,
        },
        "max_lag_hours": 24,
        "events": {
            "by_state": {"delivered": 211, "pending": 0},
            "overdue": 0,
            "endpoint_disabled_at": None,
            "delivery": {"kind": "events", "claimed": 211, "done": 211, "statuses": {"204": 211}},
            "problems": ["2 dead event(s): replay them"],
        },
    }


def rows_of(text: str) -> dict[str, str]:
    """name -> value, split at the aligned column."""
    lines = text.splitlines()
    column = len(lines[0]) - len(lines[0].split("  ")[-1].lstrip())
    out: dict[str, str] = {}
    for line in lines:
        name, value = line[:column].strip(), line[column:]
        out[name or f"{list(out)[-1]}+"] = value
    return out


def test_status_leads_and_values_are_aligned() -> None:
    text = format_summary(summary())
    lines = text.splitlines()
    assert lines[0].split() == ["status", "dirty"]
    assert lines[1].split() == ["dry_run", "no"]
    assert lines[2].split() == ["policy", "media"]
    starts = {len(line) - len(line.split("  ")[-1].lstrip()) for line in lines}
    assert len(starts) == 1, f"every value starts in one column:\n{text}"
    assert "{" not in text, "no Python reprs"
    assert "'" not in text, "no Python reprs"


def test_numbers_nesting_and_lists() -> None:
    rows = rows_of(format_summary(summary()))
    assert rows["rows_planned"] == "~580,000 (estimate)"
    assert "rows_planned_is_estimate" not in rows
    assert rows["rows_deleted"] == "11,111"
    assert rows["rows_remaining"] == "12"
    assert rows["delete_seconds"] == "1,234.5"
    assert rows["longest_batch_ms"] == "53"
    assert rows["reconcile_seconds"] == "0.042"
    assert rows["pause_reasons"] == "paced 1.5, replica_lag 2"
    assert rows["remote.eligible_rows_by_state"] == "pending 10, dead 2"
    assert rows["remote.effective_rate"] == "7.5"
    assert rows["events.delivery.done"] == "211"
    assert rows["events.delivery.statuses"] == "204 211"
    assert rows["events.problems"] == "2 dead event(s): replay them"
    assert rows["windows_unfinished"] == "media:p:w0003"
    assert rows["dirty_windows"] == "tenant 7 · ids 1–99, window_key media:p:w0003, " + (
        "rows_remaining 12"
    )


def test_empty_and_missing_values_are_left_out() -> None:
    rows = rows_of(format_summary(summary()))
    for absent in (
        "logical_date",
        "rows_counted",
        "windows_failed",
        "plan_notes",
        "partitions",
        "remote.ledger_backlog",
        "events.endpoint_disabled_at",
    ):
        assert absent not in rows
    assert rows["rows_outside_windows"] == "0", "a zero is a fact, not an empty value"


def test_unknown_keys_of_any_shape_are_shown() -> None:
    data = {
        "status": "clean",
        "other_runs": [{"run_id": "a", "rows_deleted": 3}, {"run_id": "b", "rows_deleted": 4}],
        "tag": "real",
        "drain": {"rows_deleted": 211, "by": {"x": {"y": 1}}},
        "when": dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC),
        "ratio": 0.5,
        "big": 12345678901,
        "many": list(range(25)),
        "wide": {f"k{i}": i for i in range(8)},
    }
    rows = rows_of(format_summary(data))
    assert rows["other_runs"] == "run_id a, rows_deleted 3"
    assert rows["other_runs+"] == "run_id b, rows_deleted 4"
    assert rows["tag"] == "real"
    assert rows["drain.rows_deleted"] == "211"
    assert rows["drain.by.x"] == "y 1"
    assert rows["when"] == "2026-01-02T03:04:00+00:00"
    assert rows["big"] == "12,345,678,901"
    assert rows["many"] == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 … and 15 more"
    assert rows["wide.k7"] == "7", "a wide dict gets one row per entry"


def test_a_large_dict_of_counters_shows_only_what_happened() -> None:
    idle = dict.fromkeys(("claimed", "done", "dead", "retried", "snoozed", "released"), 0)
    idle |= dict.fromkeys(("stale_leases", "lost_leases", "batches", "token_takes"), 0)
    idle |= {"kind": "operations", "out_of_time": False, "waited_for_tokens_seconds": 0.0}
    drain = {**idle, "done": 211, "rows_deleted": 211, "batches": 3, "pause": {"pauses": 0}}
    rows = rows_of(format_summary({"status": "clean", "drain": drain, "remote": {"dead": 0}}))
    assert {k: v for k, v in rows.items() if k.startswith("drain")} == {
        "drain.done": "211",
        "drain.batches": "3",
        "drain.kind": "operations",
        "drain.rows_deleted": "211",
        "drain.pause": "pauses 0",
    }
    assert rows["remote"] == "dead 0", "a small dict keeps its zeros: they are facts"


def test_long_texts_in_a_list_get_a_row_each() -> None:
    notes = [
        "no index on created_at: windows cover the whole key range up to 99",
        "the last run found 3 old row(s) outside its windows",
    ]
    lines = format_summary({"status": "clean", "plan_notes": notes}).splitlines()
    assert [line.split("  ")[-1].strip() for line in lines[1:]] == notes
    assert lines[1].startswith("plan_notes ")
    assert not lines[2][: len("plan_notes")].strip(), "a continuation row has no name"


def test_long_lists_of_dicts_are_cut() -> None:
    data = {"dirty_windows": [{"label": f"ids {i}", "rows_remaining": 1} for i in range(14)]}
    lines = format_summary(data).splitlines()
    assert len(lines) == 11
    assert lines[-1].strip() == "… and 4 more"


def test_empty_summary() -> None:
    assert format_summary({}) == "(empty summary)"


def test_a_text_of_several_lines_stays_on_its_row() -> None:
    table = format_summary({"status": "dirty", "error": "first line\n  second line\n"})
    assert table.splitlines() == ["status  dirty", "error   first line / second line"]


def test_a_run_whose_rows_another_run_deleted_says_so_after_its_first_rows() -> None:
    covered = {
        "run_id": "backfill__2026-11-27T00:00:00+00:00",
        "logical_date": "2026-11-27T00:00:00+00:00",
        "cutoff": "2026-10-28T00:00:00+00:00",
        "finished_at": "2026-12-01T10:00:00+00:00",
        "note": "nothing older than 2026-10-26 was left: run 2026-11-27 deleted it",
    }
    lines = format_summary({**summary(), "covered_by": covered}).splitlines()
    assert [line.split()[0] for line in lines[:5]] == [
        "status",
        "dry_run",
        "policy",
        "run_id",
        "covered_by",
    ]
    assert lines[4].split(None, 1)[1] == (
        "nothing older than 2026-10-26 was left: run 2026-11-27 deleted it "
        "(run id backfill__2026-11-27T00:00:00+00:00)"
    )
    assert not any(line.startswith("covered_by.") for line in lines)
