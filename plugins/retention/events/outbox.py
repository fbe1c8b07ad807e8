"""``retention.deleted`` events as a job kind of the leased queue: ``retention.outbox``.

Events are written by the same statement that records a confirmed deletion
(``ops_finish.sql``, a transactional outbox); this module only delivers them,
through the shared worker. Each delivery is signed with the Standard Webhooks
scheme by the ``standardwebhooks`` library (``webhook-id``,
``webhook-timestamp``, ``webhook-signature: v1,<base64 HMAC-SHA256>``). Every
redelivery sends the same event id and the same payload bytes; only the
timestamp and its signature are new, as the scheme prescribes. Receivers
deduplicate on ``webhook-id``: delivery is at-least-once.

Outcomes (the ``EVENT_ANSWERS`` classification table): 2xx delivered; 410 disables
the receiver for the policy (events stay pending); 429, or 503 with
Retry-After, snoozes that event without spending an attempt and ends the pass
(the rest are handed back, so a receiver that asked for a pause gets one); anything else (3xx and
timeouts included) retries with capped exponential backoff and jitter until
``max_attempts``, then the event is dead and replayable.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from standardwebhooks.webhooks import Webhook

from retention import metrics
from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.policy.model import NotifySpec
from retention.queue.classify import EVENT_ANSWERS, Classification, Outcome, classify
from retention.queue.decisions import dead, pending_again, retried, snoozed
from retention.queue.http import HttpResult, HttpSender
from retention.queue.leased import EVENTS, Finish, LeasedQueue, State
from retention.queue.worker import Attempt, Recorded, Stop, Worker, WorkerStats

log = logging.getLogger(__name__)


class NotifyConfigError(ValueError):
    """The receiver's connection cannot sign events."""


def event_id_for(operation_key: str) -> str:
    """The id of an operation's ``retention.deleted`` event, as ``ops_finish.sql`` derives it."""
    return "evt_" + hashlib.sha256(f"retention.deleted|{operation_key}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Event:
    """An event this deliverer holds a lease on."""

    event_id: str
    payload: str
    attempts: int
    created_at: dt.datetime | None = None  # when its deletion wrote it: the ack lag's start

    @property
    def key(self) -> str:
        return self.event_id

    @property
    def described(self) -> str:
        """``event evt_…``: what log lines name (the id is its key)."""
        return f"event {self.event_id}"


def decide_event(event: Event, c: Classification, now: dt.datetime, notify: NotifySpec) -> Finish:
    """Turn a classification into the outbox change (pure)."""
    if c.outcome is Outcome.CONFIRMED:
        return Finish(state=State.DELIVERED, outcome=c.outcome, status=c.status)
    if c.outcome is Outcome.RATE_LIMITED:
        return snoozed(event.key, c, now)
    if c.outcome is Outcome.GONE:  # not the event's fault: it waits for the receiver
        return pending_again(c, attempt_spent=0)
    attempts = event.attempts + 1
    if attempts >= notify.max_attempts:
        return dead(c)
    return retried(
        event.key,
        attempts,
        c,
        now,
        base=notify.backoff_base_seconds,
        cap=notify.backoff_max_seconds,
    )


class Signer:
    """Standard Webhooks signatures with the receiver's ``whsec_`` secret."""

    def __init__(self, secret: str, conn_id: str) -> None:
        if not secret.startswith("whsec_"):
            raise NotifyConfigError(
                f"connection {conn_id!r}: the signing secret must be the receiver's 'whsec_' secret"
            )
        self.webhook = Webhook(secret)

    def headers(self, event_id: str, payload: str, now: dt.datetime) -> dict[str, str]:
        moment = now.replace(microsecond=0)
        return {
            "webhook-id": event_id,
            "webhook-timestamp": str(int(moment.timestamp())),
            "webhook-signature": self.webhook.sign(event_id, moment, payload),
            "Content-Type": "application/json",
        }


class EventsKind:
    """The event job kind: what the shared worker needs to deliver signed events over HTTP."""

    table = EVENT_ANSWERS

    def __init__(self, policy: str, notify: NotifySpec, sender: HttpSender, signer: Signer) -> None:
        self.policy = policy
        self.notify = notify
        self.sender = sender
        self.signer = signer
        self.queue = LeasedQueue(EVENTS, policy, notify.lease)
        self.claim_batch = notify.claim_batch
        self.call_timeout_seconds = notify.timeout_seconds

    def job(self, row: dict[str, Any]) -> Event:
        return Event(row["event_id"], row["payload"], row["attempts"], row.get("created_at"))

    def screen(self, conn: Connection, jobs: list[Event]) -> dict[str, Finish]:
        return {}

    def send(self, job: Event) -> HttpResult:
        """One signed POST of the event (a new timestamp and signature, the same bytes)."""
        headers = self.signer.headers(job.event_id, job.payload, dt.datetime.now(dt.UTC))
        return self.sender.send(
            "POST", self.notify.endpoint, headers=headers, body=job.payload.encode()
        )

    def attempt(self, conn: Connection, job: Event) -> Classification:
        """Deliver the event and classify the receiver's answer (``EVENT_ANSWERS``)."""
        result = self.send(job)
        now = dt.datetime.now(dt.UTC)
        return classify(result.status, result.headers, result.error, now, self.table)

    def decide(self, job: Event, c: Classification, now: dt.datetime) -> Finish:
        return decide_event(job, c, now, self.notify)

    def after(self, conn: Connection, job: Event, c: Classification) -> Stop | None:
        if c.outcome is Outcome.RATE_LIMITED:
            log.warning(
                "policy %s: the event receiver asked to slow down (%s); pausing delivery",
                self.policy,
                c.reason,
            )
            return Stop("receiver_rate_limited")
        if c.outcome is not Outcome.GONE:
            return None
        conn.execute(
            query("endpoint_disable"),
            {"policy": self.policy, "reason": "receiver answered 410 Gone"},
        )
        log.warning("policy %s: the event receiver answered 410 Gone; disabled", self.policy)
        return Stop("endpoint_disabled")

    def record(
        self,
        conn: Connection,
        owner: str,
        attempts: list[Attempt],
        scope: str | None,
    ) -> Recorded:
        """The generic completion, as decided (an event deletes no rows); each event
        delivered tells the metrics its acknowledgement lag (created → 2xx)."""
        recorded = self.queue.complete(conn, owner, [(a.job.key, a.finish) for a in attempts])
        for a in attempts:
            if a.job.key in recorded and a.finish.state == State.DELIVERED and a.job.created_at:
                lag = a.finished - a.job.created_at.timestamp()
                metrics.event_ack_lag(self.policy, lag * 1000)
        return Recorded(finishes={a.job.key: a.finish for a in attempts if a.job.key in recorded})


def endpoint_disabled(conn: Connection, policy: str) -> bool:
    """Whether the policy's receiver answered 410 Gone and has not been re-enabled."""
    return conn.execute(query("endpoint_disabled"), {"policy": policy}).fetchone() is not None


def deliver_events(
    conn: Connection,
    policy: str,
    notify: NotifySpec,
    sender: HttpSender,
    signer: Signer,
    *,
    budget_seconds: float | None = None,
) -> WorkerStats:
    """One bounded pass delivering the policy's due events."""
    kind = EventsKind(policy, notify, sender, signer)
    if endpoint_disabled(conn, policy):
        log.warning("policy %s: the event receiver is disabled (410 Gone); not sending", policy)
        stats = WorkerStats(kind="events", owner="-")
        stats.stopped = "endpoint_disabled"
        return stats
    worker = Worker(conn, kind, budget_seconds=budget_seconds or notify.task_budget_seconds)
    return worker.run()
