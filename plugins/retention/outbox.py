"""Deliver ``retention.deleted`` events from the transactional outbox, signed.

Events are written by the same statement that records a confirmed deletion
(``ops_finish.sql``); this module only delivers them.  Each delivery is signed
with the Standard Webhooks scheme by the ``standardwebhooks`` library
(``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,<base64
HMAC-SHA256>``), the secret (``whsec_...``) being the connection's password.
Every redelivery sends the same event id and the same payload bytes; only the
timestamp and its signature are new, as the scheme prescribes.  Receivers
deduplicate on ``webhook-id``: delivery is at-least-once.

Outcomes: 2xx delivered; 410 disables the receiver for the policy (events stay
pending); 429, or 503 with Retry-After, waits without spending an attempt;
anything else (timeouts included) retries with capped exponential backoff and
jitter until ``max_attempts``, then the event is dead and replayable.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import requests
from psycopg import sql
from standardwebhooks.webhooks import Webhook

from retention.classify import backoff_seconds, parse_retry_after, retry_after_with_jitter
from retention.db import Connection
from retention.operations import claim_due
from retention.policy import NotifySpec, Policy
from retention.sqlfiles import query

log = logging.getLogger(__name__)

CLAIM_BATCH = 20
LEASE_SECONDS = 120.0


class NotifyConfigError(ValueError):
    """The receiver's connection cannot sign events."""


@dataclass
class DeliveryStats:
    delivered: int = 0
    retried: int = 0
    dead: int = 0
    rate_limited: int = 0
    stale: int = 0
    endpoint_disabled: bool = False
    out_of_time: bool = False
    statuses: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


class EventSender:
    """Signs and POSTs one event through the provider's HttpHook (one session per task)."""

    def __init__(self, notify: NotifySpec) -> None:
        from airflow.providers.http.hooks.http import HttpHook

        self.notify = notify
        self.hook = HttpHook(method="POST", http_conn_id=notify.http_conn_id)
        secret = self.hook.get_connection(notify.http_conn_id).password or ""
        if not secret.startswith("whsec_"):
            raise NotifyConfigError(
                f"connection {notify.http_conn_id!r}: the password must be the receiver's "
                "signing secret, 'whsec_' followed by base64"
            )
        self.signer = Webhook(secret)
        self.session = self.hook.get_conn()

    def headers(self, event_id: str, payload: str, now: dt.datetime) -> dict[str, str]:
        return {
            "webhook-id": event_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self.signer.sign(event_id, now, payload),
            "Content-Type": "application/json",
        }

    def send(self, event_id: str, payload: str) -> tuple[int | None, dict[str, str], str | None]:
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        request = requests.Request(
            "POST",
            self.hook.url_from_endpoint(self.notify.endpoint),
            data=payload.encode(),
            headers=self.headers(event_id, payload, now),
        )
        prepared = self.session.prepare_request(request)
        options = {"timeout": self.notify.timeout_seconds, "check_response": False}
        try:
            response = self.hook.run_and_check(self.session, prepared, options)
        except requests.Timeout:
            return None, {}, "timeout"
        except requests.ConnectionError:
            return None, {}, "connection"
        response.close()
        return response.status_code, dict(response.headers), None

    def close(self) -> None:
        self.session.close()


@cache
def claim_statement(state: str) -> sql.Composed:
    column = "lease_expires_at" if state == "in_flight" else "not_before"
    return query("outbox_claim", due_column=sql.Identifier(column))


def deliver_events(
    conn: Connection,
    policy: Policy,
    sender: Any,
    *,
    budget_seconds: float = 300.0,
    lease_seconds: float = LEASE_SECONDS,
    rng: random.Random | None = None,
) -> DeliveryStats:
    """Deliver the policy's due events until none are due or the budget is spent."""
    assert policy.notify is not None
    notify = policy.notify
    rng = rng or random.Random()
    owner = f"{policy.name}:events:{uuid.uuid4().hex[:12]}"
    deadline = time.monotonic() + budget_seconds
    stats = DeliveryStats()
    if conn.execute(query("endpoint_disabled"), {"policy": policy.name}).fetchone():
        stats.endpoint_disabled = True
        log.warning(
            "policy %s: the event receiver is disabled (410 Gone); not sending", policy.name
        )
        return stats
    while time.monotonic() < deadline:
        events = claim_due(
            conn,
            claim_statement,
            {"policy": policy.name, "owner": owner, "lease_seconds": lease_seconds},
            CLAIM_BATCH,
        )
        if not events:
            break
        for index, event in enumerate(events):
            if time.monotonic() >= deadline:
                _release(conn, owner, events[index:])
                stats.out_of_time = True
                return stats
            status, headers, error = sender.send(event["event_id"], event["payload"])
            stats.statuses[str(status or error)] = stats.statuses.get(str(status or error), 0) + 1
            if status == 410:
                conn.execute(
                    query("endpoint_disable"),
                    {"policy": policy.name, "reason": "receiver answered 410 Gone"},
                )
                _release(conn, owner, events[index:])
                stats.endpoint_disabled = True
                log.warning("policy %s: receiver answered 410 Gone; disabled", policy.name)
                return stats
            change = _decide(notify, event, status, headers, error, rng, stats)
            row = conn.execute(
                query("outbox_finish"), {**change, "event_id": event["event_id"], "owner": owner}
            ).fetchone()
            if row is None:
                stats.stale += 1
    log.info("policy %s: event delivery %s", policy.name, json.dumps(stats.as_dict()))
    return stats


def _decide(
    notify: NotifySpec,
    event: dict[str, Any],
    status: int | None,
    headers: dict[str, str],
    error: str | None,
    rng: random.Random,
    stats: DeliveryStats,
) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC)
    base = {
        "status": status,
        "error": error or (None if status and status < 300 else f"HTTP {status}"),
    }
    if status is not None and 200 <= status < 300:
        stats.delivered += 1
        return {**base, "state": "delivered", "attempt_spent": 1, "not_before": None, "error": None}
    retry_after = parse_retry_after(
        {k.lower(): v for k, v in headers.items()}.get("retry-after"), now
    )
    if status == 429 or (status == 503 and retry_after is not None):
        stats.rate_limited += 1
        wait = retry_after_with_jitter(retry_after or 1.0, rng)
        return {
            **base,
            "state": "pending",
            "attempt_spent": 0,
            "not_before": now + dt.timedelta(seconds=wait),
        }
    attempts = event["attempts"] + 1
    if attempts >= notify.max_attempts:
        stats.dead += 1
        return {**base, "state": "dead", "attempt_spent": 1, "not_before": None}
    stats.retried += 1
    wait = backoff_seconds(attempts, notify.backoff_base_seconds, notify.backoff_max_seconds, rng)
    return {
        **base,
        "state": "pending",
        "attempt_spent": 1,
        "not_before": now + dt.timedelta(seconds=wait),
    }


def _release(conn: Connection, owner: str, events: list[dict[str, Any]]) -> None:
    conn.execute(query("outbox_release"), {"ids": [e["event_id"] for e in events], "owner": owner})
