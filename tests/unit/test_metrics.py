"""Metric names and tags: both forms, predictable mapping, Airflow's validation, never a failure."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import retention
from retention import metrics
from retention.db.gate import PACED, PAUSE_VARIABLE
from retention.policy.model import POLICY_NAME
from retention.queue.bound import Bound, DrainSetting, PassTime, judge
from retention.queue.classify import Outcome
from retention.queue.leased import EVENTS, OPERATIONS
from retention.queue.worker import LIMITER
from tests.support.docs import docs_page
from tests.support.stats_sink import RecordingSink

LONGEST_POLICY = "p" * 100
HEALTH_REASONS = (
    "replica_lag",
    "standby_missing",
    "xact_age",
    "autovacuum",
    "blocked_sessions",
    "unknown",
)
# Every tag value the call sites send, per tag.
TAG_VALUES: dict[str, tuple[str, ...]] = {
    "kind": ("rows", OPERATIONS.kind, EVENTS.kind, "objects"),
    "state": ("done", "counted", "failed", "cancelled", *metrics.OPERATION_STATES),
    "reason": (PACED, PAUSE_VARIABLE, LIMITER, *HEALTH_REASONS),
    "outcome": tuple(o.value for o in Outcome),
    "scope": ("media_api", "a scope: with spaces, dots. and ü"),
    "table": ("public.media_assets", "public.media_renditions"),
    "verdict": tuple(b.value for b in Bound),
    "part": metrics.BOUND_PARTS,
}


class BrokenSink(RecordingSink):
    def incr(self, stat: str, count: Any = None, rate: Any = None, *, tags: Any = None) -> None:
        raise OSError("the network is gone")


@pytest.fixture
def sink(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingSink]:
    monkeypatch.delenv(metrics.NAMES_VARIABLE, raising=False)
    before = metrics.installed()
    recording = RecordingSink()
    metrics.install(recording)
    yield recording
    metrics.install(before)


def every_name(policy: str) -> list[str]:
    """Every name a policy's metrics can take, over every tag value the call sites send."""
    names = []
    for metric in metrics.METRICS.values():
        combos: list[dict[str, str]] = [{}]
        for tag in metric.tags:
            combos = [{**c, tag: v} for c in combos for v in TAG_VALUES[tag]]
        for tags in combos:
            names.extend(name for name, _ in metrics.names_for(metric, policy, tags))
    return names


def test_a_value_goes_out_under_the_tagged_and_the_per_policy_name(sink: RecordingSink) -> None:
    metrics.row_batch("media", {"public.media": 400}, 12.5)
    metrics.remote_request("media", "operations", "rate_limited")
    metrics.window_seconds("media", "done", 3.25)
    assert sink.sent == [
        ("incr", "retention.rows_deleted", 400, {"policy": "media", "table": "public_media"}),
        ("incr", "retention.media.rows_deleted", 400, None),
        ("timing", "retention.batch_ms", 12.5, {"policy": "media", "kind": "rows"}),
        ("timing", "retention.media.batch_ms.rows", 12.5, None),
        (
            "incr",
            "retention.remote.requests",
            1,
            {"policy": "media", "kind": "operations", "outcome": "rate_limited"},
        ),
        ("incr", "retention.media.remote.requests.operations.rate_limited", 1, None),
        ("incr", "retention.remote.rate_limited", 1, {"policy": "media", "kind": "operations"}),
        ("incr", "retention.media.remote.rate_limited.operations", 1, None),
        ("gauge", "retention.window_seconds", 3.25, {"policy": "media", "state": "done"}),
        ("gauge", "retention.media.window_seconds.done", 3.25, None),
    ]


def test_the_limiter_scope_is_a_tag_only_and_is_mapped_to_safe_characters(
    sink: RecordingSink,
) -> None:
    metrics.limiter_rate("media", "api.example.com:443", 12.5)
    assert sink.sent == [
        (
            "gauge",
            "retention.limiter.effective_rate",
            12.5,
            {"policy": "media", "scope": "api_example_com_443"},
        ),
        ("gauge", "retention.media.limiter.effective_rate", 12.5, None),
    ]


@pytest.mark.parametrize(
    ("forms", "names"),
    [
        ("tagged", ["retention.rows_deleted"]),
        ("per_policy", ["retention.media.rows_deleted"]),
        ("both", ["retention.rows_deleted", "retention.media.rows_deleted"]),
        ("", ["retention.rows_deleted", "retention.media.rows_deleted"]),
    ],
)
def test_the_names_variable_turns_one_form_off(
    sink: RecordingSink, monkeypatch: pytest.MonkeyPatch, forms: str, names: list[str]
) -> None:
    monkeypatch.setenv(metrics.NAMES_VARIABLE, forms)
    metrics.send("rows_deleted", "media", 1, table="public.media")
    assert [name for _, name, _, _ in sink.sent] == names


def test_an_unknown_names_setting_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(metrics.NAMES_VARIABLE, "everything")
    with pytest.raises(ValueError, match="RETENTION_METRICS_NAMES='everything' is not one of"):
        metrics.name_forms()


def test_a_failing_sink_never_fails_the_caller_and_is_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(metrics.NAMES_VARIABLE, raising=False)
    before = metrics.installed()
    broken = BrokenSink()
    metrics.install(broken)
    try:
        with caplog.at_level(logging.WARNING, logger="retention.metrics"):
            metrics.row_batch("media", {"public.media": 10}, 1.0)
            metrics.row_batch("media", {"public.media": 10}, 1.0)
        monkeypatch.setenv(metrics.NAMES_VARIABLE, "everything")
        metrics.window_seconds("media", "done", 1.0)  # a bad setting is no failure either
    finally:
        metrics.install(before)
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "metrics: could not send rows_deleted (OSError: the network is gone); "
        "further failures are not logged"
    ]
    assert [name for _, name, _, _ in broken.sent] == [
        "retention.batch_ms",
        "retention.media.batch_ms.rows",
    ] * 2, "a failure of one metric does not stop the next"


def test_a_call_with_the_wrong_tags_is_not_sent(sink: RecordingSink) -> None:
    metrics.send("operations", "media", 3)  # no state
    metrics.send("rows_deleted", "media", 3, table="t", state="done")  # a tag it does not declare
    assert sink.sent == []


def test_nothing_is_sent_until_a_sink_is_installed() -> None:
    before = metrics.installed()
    metrics.install(None)
    try:
        metrics.row_batch("media", {"public.media": 1}, 1.0)  # no error, nothing to send to
    finally:
        metrics.install(before)


def test_zero_throttling_and_an_unknown_rate_send_nothing(sink: RecordingSink) -> None:
    metrics.throttled("media", PACED, 0.0)
    metrics.limiter_rate("media", "media_api", 0.0)  # no token taken in the pass
    assert sink.sent == []


def test_a_verdict_goes_out_as_its_number_with_the_shares_it_read(sink: RecordingSink) -> None:
    capacity = PassTime(seconds=10, calling=9, calls=50, pool_sampled=10, pool_busy=9.7)
    metrics.bound("media", judge(capacity, DrainSetting("media_api", 1, 20)))
    assert [(stat, value, tags) for _, stat, value, tags in sink.sent] == [
        ("retention.bound_by", 2, {"policy": "media", "verdict": "capacity"}),
        ("retention.media.bound_by", 2, None),
        ("retention.bound.share", 0.0, {"policy": "media", "part": "limiter"}),
        ("retention.media.bound.share.limiter", 0.0, None),
        ("retention.bound.share", 0.0, {"policy": "media", "part": "waiting_for_work"}),
        ("retention.media.bound.share.waiting_for_work", 0.0, None),
        ("retention.bound.share", 0.0, {"policy": "media", "part": "database"}),
        ("retention.media.bound.share.database", 0.0, None),
        ("retention.bound.share", 0.97, {"policy": "media", "part": "pool_busy"}),
        ("retention.media.bound.share.pool_busy", 0.97, None),
    ]
    sink.sent.clear()
    metrics.bound("media", judge(PassTime(), DrainSetting("media_api", 1, 20)))
    assert sink.sent == [], "nothing measured: no verdict to send"


def test_the_queue_counts_send_what_happened_and_skip_the_zeros(sink: RecordingSink) -> None:
    metrics.queue_counts("media", "operations", claimed=4, reclaimed=1, admitted=0, completed=3)
    assert [stat for _, stat, _, _ in sink.sent if stat.startswith("retention.media.")] == [
        "retention.media.queue.claimed.operations",
        "retention.media.queue.lease_expiries.operations",
        "retention.media.queue.completed.operations",
    ]


@given(st.from_regex(POLICY_NAME, fullmatch=True))
def test_every_valid_policy_name_is_its_own_segment(name: str) -> None:
    assert metrics.segment(name) == name


def test_other_values_are_mapped_predictably() -> None:
    assert metrics.segment("a.b c/ü") == "a_b_c__"
    assert metrics.segment("") == "_"
    long_a, long_b = "x" * 150 + "a", "x" * 150 + "b"
    assert len(metrics.segment(long_a)) == metrics.MAX_SEGMENT
    assert metrics.segment(long_a) != metrics.segment(long_b)
    assert metrics.segment(long_a) == metrics.segment(long_a)


def test_per_policy_names_never_collide_with_tagged_names() -> None:
    """A policy named like a metric's first part (``remote``, ``events``…) stays apart."""
    tagged = {m.tagged_name() for m in metrics.METRICS.values()}
    first_parts = {m.name.split(".")[0] for m in metrics.METRICS.values()}
    for policy in first_parts:
        per_policy = [n for n in every_name(policy) if n not in tagged]
        assert tagged.isdisjoint(per_policy), policy


def test_every_name_passes_airflows_stat_name_validation(tmp_path: Path) -> None:
    """Airflow drops a name its validators refuse; check every name with the longest policy.

    In a subprocess with its own Airflow home: importing Airflow creates one.
    """
    names = sorted(set(every_name(LONGEST_POLICY)))
    assert max(len(n) for n in names) >= 150, "the longest policy name is in them"
    code = (
        "import json, sys\n"
        "from airflow.sdk._shared.observability.metrics.validators import (\n"
        "    stat_name_default_handler, stat_name_otel_handler)\n"
        "refused = []\n"
        "for name in json.load(sys.stdin):\n"
        "    try:\n"
        "        stat_name_default_handler('airflow.' + name)\n"
        "        stat_name_otel_handler('airflow', name)\n"
        "    except Exception as exc:\n"
        "        refused.append(f'{name}: {exc}')\n"
        "print(json.dumps(refused))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(names),
        capture_output=True,
        text=True,
        check=True,
        env={
            "PYTHONPATH": str(Path(retention.__file__).resolve().parents[1]),
            "PATH": "/usr/bin:/bin",
            "AIRFLOW_HOME": str(tmp_path),
        },
    ).stdout
    assert json.loads(out.splitlines()[-1]) == []


def metrics_page() -> str:
    return docs_page("metrics")


def test_the_metrics_page_lists_every_metric_and_no_other() -> None:
    section = metrics_page()
    listed = set(re.findall(r"^\| `retention\.([a-z_.]+)` \|", section, flags=re.MULTILINE))
    assert listed == set(metrics.METRICS)
    for metric in metrics.METRICS.values():
        row = next(line for line in section.splitlines() if f"`{metric.tagged_name()}`" in line)
        assert f"| {metric.type} |" in row, metric.name
        for tag in metric.tags:
            assert f"`{tag}`" in row, (metric.name, tag)
