"""Retention's metrics, sent through Airflow's stats facade (StatsD, DogStatsD or OpenTelemetry).

Every metric is declared once in :data:`METRICS` (its type, its tags and what it
means; docs/metrics.md's table lists the same names) and sent by one small
function per family, so a call site elsewhere is one line.

Each value goes out under two names, because backends differ in what they keep:

- the **tagged** name ``retention.<metric>`` with ``tags={"policy": ..., ...}``,
  for backends that keep tags (OpenTelemetry, DogStatsD, StatsD with InfluxDB
  tags). A plain StatsD server drops the tags, so there this name sums (counters)
  or mixes (gauges) every policy;
- the **per-policy** name ``retention.<policy>.<metric>[.<tag value>...]``, with
  the tag values a metric declares in ``in_name`` appended in order
  (``retention.media.operations.pending``), for backends that do not.

``RETENTION_METRICS_NAMES`` (``both``, the default; ``tagged``; ``per_policy``)
turns one form off where it only doubles the series. Names and tag values keep
to the characters Airflow's stat-name validation allows: a policy name always
does (``[A-Za-z0-9_]{1,100}``); anything else is mapped by :func:`segment`.

This module never imports Airflow, so the layers below the Airflow layer can
emit without it: the Airflow layer's ``steps`` module, which every task process
loads, passes Airflow's stats facade to :func:`install`. Until then, and in
tests that install nothing, sending is a no-op. Sending never fails a task: a
sink that raises is logged once and skipped, and the reconcile-time gauges log
a failed query and go on.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import psycopg

from retention.db.connection import Connection, bounded
from retention.db.oldest import oldest_eligible
from retention.db.sqlfiles import query
from retention.policy.model import Policy
from retention.summary import BoundEvidence, RunSummary

log = logging.getLogger(__name__)

PREFIX = "retention"
NAMES_VARIABLE = "RETENTION_METRICS_NAMES"
NAME_FORMS = ("both", "tagged", "per_policy")
MAX_SEGMENT = 100  # a policy name's own limit; longer values are cut and hashed
UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # '.' would split a segment in two

MetricType = Literal["counter", "gauge", "timer"]
OPERATION_STATES = ("pending", "in_flight", "dead", "held")  # not done: its count only grows
UNDELIVERED = ("pending", "in_flight")  # events.pending: every event not delivered yet


class StatsSink(Protocol):
    """What this module needs of Airflow's ``airflow.sdk.observability.stats``."""

    def incr(
        self,
        stat: str,
        count: int | None = None,
        rate: int | float | None = None,
        *,
        tags: dict[str, Any] | None = None,
    ) -> None: ...

    def gauge(
        self,
        stat: str,
        value: float,
        rate: int | float | None = None,
        delta: bool | None = None,
        *,
        tags: dict[str, Any] | None = None,
    ) -> None: ...

    def timing(self, stat: str, dt: Any, *, tags: dict[str, Any] | None = None) -> None: ...


@dataclass(frozen=True)
class Metric:
    """One metric: its name under ``retention.``, type, tags besides ``policy``, meaning."""

    name: str
    type: MetricType
    meaning: str
    tags: tuple[str, ...] = ()
    in_name: tuple[str, ...] = ()  # tags whose values the per-policy name carries, in order

    def tagged_name(self) -> str:
        return f"{PREFIX}.{self.name}"

    def per_policy_name(self, policy: str, tags: Mapping[str, str]) -> str:
        parts = [PREFIX, segment(policy), self.name, *(segment(tags[t]) for t in self.in_name)]
        return ".".join(parts)


def _metric(name: str, type_: MetricType, meaning: str, *tags: str, in_name: bool = True) -> Metric:
    return Metric(name, type_, meaning, tags, tags if in_name else ())


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        _metric(
            "rows_deleted",
            "counter",
            "Rows deleted from the policy's table, counted when their batch commits "
            "(row batches, and remote batches whose objects the API confirmed); not the "
            "partitions the fast path drops (the run summary lists those). `table`: the "
            "policy's table or a child table deleted with its rows (not in the per-policy "
            "name, which sums the tables).",
            "table",
            in_name=False,
        ),
        _metric(
            "batch_ms",
            "timer",
            "Milliseconds one batch took: a row batch's transaction (`kind` rows), or "
            "one worker batch of claimed jobs, calls included (`operations`, `events`).",
            "kind",
        ),
        _metric(
            "window_seconds",
            "gauge",
            "Seconds the last finished window attempt took, by how it ended "
            "(`state` done, counted in a dry run, failed, or cancelled by a SIGTERM).",
            "state",
        ),
        _metric(
            "throttled_seconds",
            "counter",
            "Seconds deleters waited instead of working, by `reason`: the pause switch "
            "(`retention_pause`), a health limit (`replica_lag`, `standby_missing`, "
            "`xact_age`, `autovacuum`, `blocked_sessions`), pacing (`paced`), or tokens of the "
            "limiter (`limiter`: its rate, a 429's Retry-After, an outage pause).",
            "reason",
        ),
        _metric(
            "remote.requests",
            "counter",
            "HTTP calls answered or not, by `kind` (operations, events) and `outcome` "
            "class: confirmed, rate_limited, uncertain (incl. no response), rejected, "
            "auth, gone.",
            "kind",
            "outcome",
        ),
        _metric(
            "remote.rate_limited",
            "counter",
            "Calls the API rate-limited (429, or 503 with Retry-After), by `kind`.",
            "kind",
        ),
        _metric(
            "limiter.effective_rate",
            "gauge",
            "Calls per second the limiter `scope` allows now (lowered by a 429 to what the "
            "API admitted, or halved; climbing back over `recovery_seconds`): after a 429 "
            "and at the end of each pass. "
            "The scope is a tag only: one policy works one scope.",
            "scope",
            in_name=False,
        ),
        _metric(
            "rows_remaining",
            "gauge",
            "Rows older than the run's cutoff still in the table, at reconcile "
            "(0 after a clean run; a dry run deletes nothing).",
        ),
        _metric(
            "oldest_eligible_age_seconds",
            "gauge",
            "Age of the oldest row still older than the cutoff (now minus its "
            "timestamp), at reconcile; 0 when none remains.",
        ),
        _metric(
            "operations",
            "gauge",
            "Remote operations of the policy by `state` (pending, in_flight, dead, held), "
            "at reconcile; 0 for a state with none.",
            "state",
        ),
        _metric(
            "held",
            "gauge",
            "What legal holds keep of the policy at reconcile, by `kind`: `rows` older "
            "than the cutoff that a hold keeps, `objects` whose operation waits in held "
            "(remote policies).",
            "kind",
        ),
        _metric(
            "dead_letters",
            "gauge",
            "Dead operations or events awaiting review or replay (the dead-letter queue's "
            "depth), by `kind`: at every worker pass of the kind, and at reconcile.",
            "kind",
        ),
        _metric(
            "events.pending",
            "gauge",
            "`retention.deleted` events not delivered yet (pending or in flight), at reconcile.",
        ),
        _metric(
            "bound_by",
            "gauge",
            "What bounded the drain, as a number: 0 nothing (the work ran out), 1 the "
            "upstream API (the limiter), 2 the pool's slots (capacity), 3 the database "
            "(pauses, pacing); the `verdict` tag says it in words. At the end of each "
            "remote pass (a window's, or drain_operations'), then at reconcile for the run.",
            "verdict",
            in_name=False,
        ),
        _metric(
            "bound.share",
            "gauge",
            "The shares (0 to 1) the verdict of `bound_by` read, by `part`: `limiter` (no "
            "token, or the scope closed), `waiting_for_work` (nothing to call), "
            "`database` (paused or paced), `pool_busy` (the pool had no free slot; not sent "
            "when the pool's stats were not read). With `bound_by`.",
            "part",
        ),
        _metric(
            "remote.call_ms",
            "gauge",
            "Mean milliseconds of one call of the pass, from sending to the answer, by `kind`: "
            "the latency Little's law multiplies by the rate. At the end of each pass.",
            "kind",
        ),
        _metric(
            "queue.oldest_pending_age_seconds",
            "gauge",
            "Age of the policy's oldest pending job (since enqueued), by `kind`; 0 when none. "
            "At every worker pass (and every 30 s of a long one).",
            "kind",
        ),
        _metric(
            "queue.oldest_leased_age_seconds",
            "gauge",
            "Age of the policy's oldest leased (in flight) job (since enqueued), by `kind`; "
            "0 when none. At every worker pass (and every 30 s of a long one).",
            "kind",
        ),
        _metric(
            "queue.claimed",
            "counter",
            "Jobs claimed by workers, by `kind`, after each claim: its rate is the claim rate.",
            "kind",
        ),
        _metric(
            "queue.admitted",
            "counter",
            "Calls the limiter admitted (tokens granted; every call of a kind without a "
            "limiter), by `kind`, after each batch: its rate is the admitted request rate.",
            "kind",
        ),
        _metric(
            "queue.completed",
            "counter",
            "Jobs completed (operations done, events delivered), by `kind`, after each "
            "batch: its rate is the completion rate.",
            "kind",
        ),
        _metric(
            "queue.lease_expiries",
            "counter",
            "Jobs claimed again after their lease expired (the worker holding them was lost "
            "or too slow), by `kind`, after each claim.",
            "kind",
        ),
        _metric(
            "events.ack_lag_ms",
            "timer",
            "Milliseconds from an event's creation (its row's deletion) to the receiver's "
            "2xx, for each event delivered.",
        ),
    )
}
# The numbers of ``bound_by``, by verdict (``retention.queue.bound.Bound``); ``unknown``
# (nothing measured) has none and is not sent.
BOUND_CODES = {"unbound": 0, "upstream": 1, "capacity": 2, "database": 3}
# The parts of ``bound.share``, in the order they are sent.
BOUND_PARTS = ("limiter", "waiting_for_work", "database", "pool_busy")


def segment(value: str) -> str:
    """One dot-free name segment: characters outside ``[A-Za-z0-9_-]`` become ``_``.

    A value longer than :data:`MAX_SEGMENT` keeps its first characters and a
    short hash of the whole, so distinct values stay distinct and every name
    stays within Airflow's 250-character limit.
    """
    cleaned = UNSAFE.sub("_", value) or "_"
    if len(cleaned) <= MAX_SEGMENT:
        return cleaned
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{cleaned[: MAX_SEGMENT - 9]}-{digest}"


def name_forms() -> str:
    """Which names are sent (``RETENTION_METRICS_NAMES``); an unknown value is refused."""
    value = os.environ.get(NAMES_VARIABLE, "both").strip().lower() or "both"
    if value not in NAME_FORMS:
        raise ValueError(
            f"{NAMES_VARIABLE}={value!r} is not one of {', '.join(NAME_FORMS)}; "
            "set it to one of those (or unset it for both)"
        )
    return value


def names_for(
    metric: Metric, policy: str, tags: Mapping[str, str]
) -> list[tuple[str, dict[str, str]]]:
    """The (name, tags) pairs one value is sent under (see the module's docs)."""
    forms = name_forms()
    sent: list[tuple[str, dict[str, str]]] = []
    if forms in ("both", "tagged"):
        sent.append((metric.tagged_name(), {"policy": segment(policy), **_tag_values(tags)}))
    if forms in ("both", "per_policy"):
        sent.append((metric.per_policy_name(policy, tags), {}))
    return sent


def _tag_values(tags: Mapping[str, str]) -> dict[str, str]:
    return {key: segment(str(value)) for key, value in tags.items()}


class _Sending:
    """The installed sink, and whether a failure has been logged (once is enough)."""

    sink: StatsSink | None = None
    failed: bool = False


def install(sink: StatsSink | None) -> None:
    """Send through ``sink`` from now on (None: send nothing)."""
    _Sending.sink = sink
    _Sending.failed = False


def installed() -> StatsSink | None:
    return _Sending.sink


def send(name: str, policy: str, value: float, **tags: str) -> None:
    """Send one value of a declared metric under its names (:func:`names_for`); never raises."""
    sink = _Sending.sink
    if sink is None:
        return
    metric = METRICS[name]
    try:
        if set(tags) != set(metric.tags):
            raise ValueError(f"metric {name}: tags {sorted(tags)}, declared {list(metric.tags)}")
        for stat, stat_tags in names_for(metric, policy, tags):
            if metric.type == "counter":
                sink.incr(stat, value, tags=stat_tags or None)  # type: ignore[arg-type]
            elif metric.type == "gauge":
                sink.gauge(stat, value, tags=stat_tags or None)
            else:
                sink.timing(stat, value, tags=stat_tags or None)
    except Exception as failed:
        if not _Sending.failed:
            log.warning(
                "metrics: could not send %s (%s: %s); further failures are not logged",
                name,
                type(failed).__name__,
                failed,
            )
        _Sending.failed = True


# One function per family: each call site is one line.


def row_batch(policy: str, rows_by_table: Mapping[str, int], elapsed_ms: float) -> None:
    """A committed row batch: its rows of each table (the policy's and its children's)
    and its transaction's time, children included."""
    for table, rows in rows_by_table.items():
        send("rows_deleted", policy, rows, table=table)
    send("batch_ms", policy, elapsed_ms, kind="rows")


def queue_batch(
    policy: str, kind: str, rows_by_table: Mapping[str, int], elapsed_ms: float
) -> None:
    """A recorded worker batch of a leased queue (rows deleted: operations confirmed, by
    table: the policy's and its children's)."""
    for table, rows in rows_by_table.items():
        if rows:
            send("rows_deleted", policy, rows, table=table)
    send("batch_ms", policy, elapsed_ms, kind=kind)


def window_seconds(policy: str, state: str, seconds: float) -> None:
    """A window attempt ended (``done``, ``counted`` or ``failed``)."""
    send("window_seconds", policy, round(seconds, 3), state=state)


def throttled(policy: str, reason: str, seconds: float) -> None:
    """Time a gate paused or paced instead of working, by reason."""
    if seconds > 0:
        send("throttled_seconds", policy, round(seconds, 3), reason=reason)


def remote_request(policy: str, kind: str, outcome: str) -> None:
    """One HTTP call by its outcome class; a rate-limited one is also counted as such."""
    send("remote.requests", policy, 1, kind=kind, outcome=outcome)
    if outcome == "rate_limited":
        send("remote.rate_limited", policy, 1, kind=kind)


def limiter_rate(policy: str, scope: str, rate: float) -> None:
    """The limiter scope's effective rate as last read (after a 429, at the end of a pass)."""
    if rate > 0:
        send("limiter.effective_rate", policy, round(rate, 4), scope=scope)


def bound(policy: str, evidence: BoundEvidence) -> None:
    """A verdict on what bounded a drain (a pass's or a run's) and the shares it read;
    an ``unknown`` one (nothing measured) sends nothing."""
    code = BOUND_CODES.get(evidence.verdict)
    if code is None:
        return
    send("bound_by", policy, code, verdict=evidence.verdict)
    shares = {
        "limiter": evidence.limiter_share,
        "waiting_for_work": evidence.waiting_for_work_share,
        "database": evidence.database_share,
        "pool_busy": evidence.pool_busy_share,
    }
    for part in BOUND_PARTS:
        if (value := shares[part]) is not None:
            send("bound.share", policy, value, part=part)


def call_ms(policy: str, kind: str, calls: int, calling_seconds: float) -> None:
    """A pass's mean call latency (nothing when it made no call)."""
    if calls:
        send("remote.call_ms", policy, round(calling_seconds * 1000 / calls, 1), kind=kind)


def queue_figures(
    policy: str,
    kind: str,
    *,
    oldest_pending_seconds: float | None,
    oldest_leased_seconds: float | None,
    dead: int,
) -> None:
    """A queue's figures read during a pass: the oldest jobs' ages and its dead letters."""
    send(
        "queue.oldest_pending_age_seconds", policy, round(oldest_pending_seconds or 0, 3), kind=kind
    )
    send("queue.oldest_leased_age_seconds", policy, round(oldest_leased_seconds or 0, 3), kind=kind)
    send("dead_letters", policy, dead, kind=kind)


def queue_counts(
    policy: str,
    kind: str,
    *,
    claimed: int = 0,
    reclaimed: int = 0,
    admitted: int = 0,
    completed: int = 0,
) -> None:
    """What a worker did since it last said: jobs claimed (and of those, taken over
    after their lease expired), calls admitted, jobs completed. Zeros are not sent."""
    for name, value in (
        ("queue.claimed", claimed),
        ("queue.lease_expiries", reclaimed),
        ("queue.admitted", admitted),
        ("queue.completed", completed),
    ):
        if value:
            send(name, policy, value, kind=kind)


def event_ack_lag(policy: str, milliseconds: float) -> None:
    """One event delivered: from its creation to the receiver's 2xx."""
    send("events.ack_lag_ms", policy, round(max(0.0, milliseconds), 1))


def emit_run_gauges(
    conn: Connection, policy: Policy, summary: RunSummary | Mapping[str, Any]
) -> None:
    """The reconcile-time gauges of a run: what remains, how old, and the queues' backlog.

    Reads what the summary does not hold with ``include/sql/metrics_*.sql``
    (each bounded by the policy's timeouts). Never raises: a failed query is
    logged and its gauges are skipped, the run's outcome is reconcile's to say.
    """
    if _Sending.sink is None:
        return
    try:
        run = RunSummary.of(summary)
        if run.rows_remaining is None or run.cutoff is None:
            raise ValueError("the summary has no rows_remaining or cutoff (not reconciled)")
        send("rows_remaining", policy.name, int(run.rows_remaining))
        send("held", policy.name, int(run.rows_held), kind="rows")
        if run.objects_held is not None:
            send("held", policy.name, int(run.objects_held), kind="objects")
        if run.bound is not None:
            bound(policy.name, run.bound)
        cutoff = dt.datetime.fromisoformat(run.cutoff)
        send("oldest_eligible_age_seconds", policy.name, _oldest_eligible_age(conn, policy, cutoff))
        if policy.remote is None and policy.notify is None:
            return
        backlog = _queue_backlog(conn, policy)
        if policy.remote is not None:
            for state in OPERATION_STATES:
                send("operations", policy.name, backlog.get(("operations", state), 0), state=state)
            send(
                "dead_letters",
                policy.name,
                backlog.get(("operations", "dead"), 0),
                kind="operations",
            )
        if policy.notify is not None:
            pending = sum(backlog.get(("events", state), 0) for state in UNDELIVERED)
            send("events.pending", policy.name, pending)
            send("dead_letters", policy.name, backlog.get(("events", "dead"), 0), kind="events")
    except (psycopg.Error, KeyError, ValueError, TypeError) as failed:
        log.warning(
            "policy %s: metrics: reconcile gauges skipped (%s: %s); the run is unaffected",
            policy.name,
            type(failed).__name__,
            next(iter(str(failed).splitlines()), ""),
        )


def _oldest_eligible_age(conn: Connection, policy: Policy, cutoff: dt.datetime) -> float:
    oldest = oldest_eligible(conn, policy, cutoff)
    return 0.0 if oldest is None else max(0.0, (dt.datetime.now(dt.UTC) - oldest).total_seconds())


def _queue_backlog(conn: Connection, policy: Policy) -> dict[tuple[str, str], int]:
    with bounded(conn, policy.timeouts, reads=True):
        rows = conn.execute(query("metrics_queue_backlog"), {"policy": policy.name}).fetchall()
    return {(row["kind"], row["state"]): int(row["n"]) for row in rows}
