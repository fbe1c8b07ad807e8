"""What the finishing pass does with an unfinished partition record (pure), as a table:
only the very table that was detached is ever dropped."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from retention.alerts.messages import RunFacts, decide_alerts
from retention.policy.model import AlertsSpec
from retention.rows.partitions import ExpiredPartition, TableNow, finishing_verdict

NAME = "public.events_20251201"
OID, OTHER = 1001, 2002


def now(**facts: Any) -> TableNow:
    """The catalog's answer for a detached table still called by its name (overridable)."""
    base: dict[str, Any] = {
        "recorded_oid": OID,
        "name_oid": OID,
        "oid_exists": True,
        "oid_name": NAME,
        "is_partition": False,
        "parent_name": None,
        "attached_to_policy_table": False,
    }
    return TableNow(**{**base, **facts})


ATTACHED = {"is_partition": True, "parent_name": "public.events", "attached_to_policy_table": True}
ELSEWHERE = {"is_partition": True, "parent_name": "public.archive"}
RENAMED = {"name_oid": None, "oid_name": "public.kept"}
NAME_TAKEN = {"name_oid": OTHER, "oid_name": "public.kept"}
GONE = {"oid_exists": False, "oid_name": None, "name_oid": None}

CASES = [
    # (action, state, facts, verdict, words in the reason)
    ("drop", "detached", {}, "drop", None),
    ("drop", "started", {}, "drop", None),
    ("detach", "started", {}, "detached", None),
    ("drop", "started", ATTACHED, "not_detached", "still a partition of public.events"),
    ("drop", "detached", ATTACHED, "abandoned", "is a partition of public.events again"),
    ("drop", "detached", ELSEWHERE, "abandoned", "is a partition of public.archive;"),
    ("drop", "detached", RENAMED, "abandoned", "was renamed to public.kept"),
    ("drop", "detached", NAME_TAKEN, "abandoned", f"{NAME} now names a different table"),
    ("detach", "started", RENAMED, "detached", "renamed to public.kept"),
    ("drop", "detached", GONE, "dropped", f"already gone: no table has oid {OID}"),
    ("drop", "detached", {**GONE, "name_oid": OTHER}, "dropped", "now belongs to another table"),
    ("drop", "detached", {"recorded_oid": None}, "abandoned", "no oid was recorded"),
    ("drop", "started", {"recorded_oid": None, **ATTACHED}, "not_detached", "still a partition"),
    ("drop", "detached", {"recorded_oid": None, **ATTACHED}, "abandoned", "no oid was recorded"),
]


@pytest.mark.parametrize(("action", "state", "facts", "verdict", "words"), CASES)
def test_only_the_recorded_table_is_ever_dropped(
    action: str, state: str, facts: dict[str, Any], verdict: str, words: str | None
) -> None:
    decided, reason = finishing_verdict(NAME, action, state, now(**facts))
    assert decided == verdict
    if words is None:
        assert reason is None
    else:
        assert reason is not None
        assert words in reason


FACTS = [
    {},
    ATTACHED,
    ELSEWHERE,
    RENAMED,
    NAME_TAKEN,
    GONE,
    {**GONE, "name_oid": OTHER},
    {"recorded_oid": None},
    {"recorded_oid": None, **ATTACHED},
    {"recorded_oid": None, "name_oid": None},
    {"is_partition": True, "parent_name": None},
    {"detach_pending": True, **ATTACHED},
    {"name_oid": OTHER, **ATTACHED},
]


@pytest.mark.parametrize(
    ("facts", "action", "state"),
    itertools.product(FACTS, ["drop", "detach", "rows"], ["started", "detached", "abandoned"]),
)
def test_drop_is_decided_only_for_the_same_oid_under_the_same_name_and_unattached(
    facts: dict[str, Any], action: str, state: str
) -> None:
    table = now(**facts)
    verdict, _ = finishing_verdict(NAME, action, state, table)
    if verdict == "drop":
        assert table.recorded_oid is not None
        assert table.name_oid == table.recorded_oid
        assert table.oid_exists
        assert not table.is_partition
        assert not table.attached_to_policy_table
        assert action == "drop"


def test_a_never_analysed_partition_reads_unknown_not_zero() -> None:
    partition = ExpiredPartition("public", "p", 1, "FOR VALUES …", None, False)
    assert partition.as_dict()["estimated_rows"] == "unknown"


SPEC = AlertsSpec.model_validate({"on_dirty": "ops_dirty", "on_failure": "ops_failed"})


def dirty_by_partitions() -> dict[str, Any]:
    return {
        "status": "dirty",
        "cutoff": "2026-03-01T00:00:00+00:00",
        "table": "public.events",
        "rows_deleted": 10,
        "rows_remaining": 0,
        "dry_run": False,
        "partition_problems": [
            "public.events_20251201 is detached, not dropped (run run-0): "
            "DependentObjectsStillExist: cannot drop table events_20251201",
            "public.events_20260101: its drop was abandoned: public.events_20260101 now "
            "names a different table",
        ],
    }


def test_the_dirty_alert_names_the_partitions_that_made_the_run_dirty() -> None:
    facts = RunFacts("events", "retention__events", "run-1", dirty_by_partitions())
    [alert] = decide_alerts(SPEC, facts, remote=False)
    assert alert.kind == "dirty"
    assert "Partitions: public.events_20251201 is detached, not dropped" in alert.text
    assert "its drop was abandoned" in alert.text
    assert alert.figures["partition_problems"] == dirty_by_partitions()["partition_problems"]
    assert alert.runbook.heading == "A dirty run"


def test_without_on_dirty_the_failure_alert_names_them() -> None:
    spec = AlertsSpec.model_validate({"on_failure": "ops_failed"})
    facts = RunFacts(
        "events", "retention__events", "run-1", dirty_by_partitions(), failed_tasks=("reconcile",)
    )
    [alert] = decide_alerts(spec, facts, remote=False)
    assert alert.kind == "failure"
    assert "Partitions: public.events_20251201 is detached, not dropped" in alert.text
