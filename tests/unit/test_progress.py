"""Progress lines with a fake clock: when they are logged and what they say (no sleeping)."""

from __future__ import annotations

import logging

import pytest

from retention.progress import (
    PROGRESS_SECONDS_VARIABLE,
    PhaseTimer,
    Progress,
    duration,
    plural,
    progress_interval,
    rate,
    throttle_words,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "retention.progress"]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_a_line_every_interval_not_after_each_batch(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention.progress")
    progress = Progress("tenant 7 · ids 1–5000", expected=5000, every=10, clock=clock)
    logged = []
    for batch in range(1, 26):  # 25 batches of 100 rows, one every 2 s
        clock.advance(2)
        logged.append(progress.update(batch * 100))
    assert logged.count(True) == 5, "50 s of batches, a line every 10 s"
    assert [i + 1 for i, was in enumerate(logged) if was] == [5, 10, 15, 20, 25]
    first = messages(caplog)[0]
    assert first == (
        "tenant 7 · ids 1–5000: done 500 of ~5,000 rows (10%), 50.0 rows/s, ETA 1 min 30 s, "
        "not throttled"
    )


def test_the_label_leads_and_the_numbers_follow(clock: FakeClock) -> None:
    progress = Progress("ids 1–9", expected=10, every=10, clock=clock)
    clock.advance(4)
    progress.update(2, {"paced": 1.0})
    assert progress.line(clock()).startswith(
        "ids 1–9: done 2 of ~10 rows (20%), 0.50 rows/s, ETA 16 s"
    )


def test_final_line_has_total_time_rate_and_throttling(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retention.progress")
    progress = Progress("no tenant · ids 10–99", expected=1000, every=10, clock=clock)
    clock.advance(5)
    progress.update(1200, {"paced": 2.0, "replica_lag": 0.0, "blocked_sessions": 3.5})
    assert messages(caplog) == [], "within the interval: no line yet"
    text = progress.finish("deleted")
    assert text == (
        "no tenant · ids 10–99: deleted 1,200 of ~1,000 rows (120%) in 5.0 s, 240 rows/s, "
        "throttled 5.5 s (blocked_sessions 3.5 s, paced 2.0 s)"
    )
    assert messages(caplog) == [text]


def test_unknown_expected_shows_no_share_and_no_eta(clock: FakeClock) -> None:
    progress = Progress(
        "operations drain", expected=None, unit="operations", estimate=False, clock=clock
    )
    clock.advance(20)
    progress.update(40)
    assert (
        progress.line(clock())
        == "operations drain: done 40 operations, 2.00 operations/s, not throttled"
    )


def test_exact_expected_and_eta_edges(clock: FakeClock) -> None:
    progress = Progress("w", expected=10, unit="operations", estimate=False, clock=clock)
    assert progress.line(
        clock()
    ) == "w: done 0 of 10 operations (0%), 0.00 operations/s, ETA unknown, " + ("not throttled")
    clock.advance(1)
    progress.update(10)
    assert "ETA now," in progress.line(clock())
    assert "~" not in progress.line(clock())


def test_extra_words_go_last(clock: FakeClock) -> None:
    progress = Progress("w", expected=None, every=1, clock=clock)
    clock.advance(1)
    progress.update(1, extra="2 timeouts")
    assert progress.line(clock(), extra="2 timeouts").endswith("not throttled, 2 timeouts")


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0.04, "40 ms"),
        (0.9994, "999 ms"),
        (0.9996, "1.0 s"),
        (1.0, "1.0 s"),
        (9.96, "10.0 s"),
        (12.4, "12 s"),
        (185, "3 min 05 s"),
        (7620, "2 h 07 min"),
    ],
)
def test_durations(seconds: float, words: str) -> None:
    assert duration(seconds) == words


@pytest.mark.parametrize(
    ("per_second", "words"), [(0.254, "0.25/s"), (12.34, "12.3/s"), (12345.6, "12,346/s")]
)
def test_rates(per_second: float, words: str) -> None:
    assert rate(per_second) == words
    assert rate(per_second, "rows") == words.replace("/s", " rows/s")


def test_plurals() -> None:
    assert plural(1, "window") == "1 window"
    assert plural(1200, "row") == "1,200 rows"
    assert plural(1, "batch", "batches") == "1 batch"
    assert plural(0, "batch", "batches") == "0 batches"


def test_throttle_words_largest_reason_first() -> None:
    assert throttle_words({}) == "not throttled"
    assert throttle_words({"paced": 0.0}) == "not throttled"
    assert throttle_words({"a": 1.0, "b": 30.0}) == "throttled 31 s (b 30 s, a 1.0 s)"


def test_interval_from_the_environment() -> None:
    assert progress_interval({}) == 10.0
    assert progress_interval({PROGRESS_SECONDS_VARIABLE: "0.5"}) == 0.5
    for bad in ("0", "-1", "soon", "nan"):
        with pytest.raises(ValueError, match=PROGRESS_SECONDS_VARIABLE):
            progress_interval({PROGRESS_SECONDS_VARIABLE: bad})


def test_interval_is_read_when_the_loop_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROGRESS_SECONDS_VARIABLE, "2.5")
    assert Progress("w", expected=None).every == 2.5


def test_phase_timer_logs_each_step_and_heartbeats(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="retention.progress")
    timer = PhaseTimer("policy p: plan", every=10, clock=clock)
    with timer.step("reading indexes") as step:
        clock.advance(0.3)
        step.found = "key and timestamp indexed"
    with timer.step("snapping window starts") as step:
        for i in range(1, 7):
            clock.advance(4)
            step.tick(i, 6)

    def failing_probe() -> None:
        with timer.step("probing the eligible key range"):
            clock.advance(1)
            raise RuntimeError("statement timeout")

    with pytest.raises(RuntimeError):
        failing_probe()
    levels = [r.levelname for r in caplog.records if r.name == "retention.progress"]
    assert levels == ["DEBUG", "INFO", "INFO", "INFO", "INFO"], "a quick step only at DEBUG"
    assert timer.summary() == (
        "reading indexes 300 ms, snapping window starts 24 s, probing the eligible key range 1.0 s"
    )
    assert messages(caplog) == [
        "policy p: plan: reading indexes took 300 ms: key and timestamp indexed",
        "policy p: plan: snapping window starts: 3 of 6 probes, 12 s so far",
        "policy p: plan: snapping window starts: 6 of 6 probes, 24 s so far",
        "policy p: plan: snapping window starts took 24 s",
        "policy p: plan: probing the eligible key range failed after 1.0 s",
    ]
    assert timer.steps == pytest.approx(
        {
            "reading indexes": 0.3,
            "snapping window starts": 24,
            "probing the eligible key range": 1,
        }
    )


def test_past_an_estimate_says_so(clock: FakeClock) -> None:
    progress = Progress("w", expected=10, clock=clock)
    clock.advance(1)
    progress.update(10)
    assert ", ETA now, " in progress.line(clock())
    progress.update(12)
    assert "done 12 of ~10 rows (120%), 12.0 rows/s, ETA now (past the estimate)," in (
        progress.line(clock())
    )
