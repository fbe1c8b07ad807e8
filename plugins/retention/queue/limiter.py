"""A token bucket kept in Postgres, shared by every worker of a limiter scope.

However many tasks, workers and DAGs call the same API, they take tokens from
one row of ``retention.rate_limiters``, so together they stay within
``rate_per_second`` (plus ``burst``).  Taking a token is one short statement;
waiting happens in Python, never inside a transaction.  The configured rate is
a ceiling: an unexpected 429 halves the scope's effective rate and closes it
until Retry-After, and the rate climbs back linearly over ``recovery_seconds``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.policy.model import RemoteSpec

log = logging.getLogger(__name__)

MAX_SINGLE_WAIT_SECONDS = 1.0


@dataclass
class TokenBucket:
    """Client of one scope's bucket; ``acquire`` blocks (outside transactions) until a token."""

    conn: Connection
    scope: str
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    effective_rate: float = 0.0
    waited_seconds: float = 0.0

    @classmethod
    def for_remote(cls, conn: Connection, remote: RemoteSpec) -> TokenBucket:
        """Create or update the scope from the policy, then return a client for it."""
        conn.execute(
            query("limiter_ensure"),
            {
                "scope": remote.scope,
                "rate": remote.rate_per_second,
                "min_rate": max(0.01, remote.rate_per_second / 100),
                "burst": remote.burst,
                "recovery_seconds": remote.recovery_seconds,
            },
        )
        return cls(conn, remote.scope)

    def try_take(self) -> tuple[bool, float]:
        """One attempt: (granted, seconds to wait before the next try)."""
        row = self.conn.execute(
            query("limiter_take"), {"scope": self.scope}, prepare=True
        ).fetchone()
        assert row is not None
        self.effective_rate = float(row["effective_rate"])
        return bool(row["granted"]), float(row["wait_seconds"])

    def acquire(
        self,
        deadline: float,
        on_wait: Callable[[], None] | None = None,
        max_pause: float = MAX_SINGLE_WAIT_SECONDS,
    ) -> bool:
        """Wait for a token until ``deadline`` (a ``clock()`` value); False if it passes.

        ``on_wait`` runs before each pause of at most ``max_pause`` seconds (the
        worker renews its leases there, so it pauses less than a renewal interval).
        """
        while True:
            granted, wait = self.try_take()
            if granted:
                return True
            now = self.clock()
            if now + wait > deadline:
                return False
            pause = max(0.01, min(wait, MAX_SINGLE_WAIT_SECONDS, max_pause))
            if on_wait is not None:
                on_wait()
            self.waited_seconds += pause
            self.sleep(pause)

    def pause(self, seconds: float) -> None:
        """Close the scope for ``seconds`` without lowering its rate (the API is down)."""
        self.conn.execute(query("limiter_pause"), {"scope": self.scope, "seconds": seconds})

    def throttle(self, retry_after_seconds: float) -> float:
        """Report a 429: close the scope for ``retry_after_seconds``; returns the new rate."""
        row = self.conn.execute(
            query("limiter_throttle"), {"scope": self.scope, "seconds": retry_after_seconds}
        ).fetchone()
        self.effective_rate = float(row["effective_rate"]) if row else self.effective_rate
        log.warning(
            "limiter %s: rate limited by the API; closed for %.1fs, effective rate now %.2f/s",
            self.scope,
            retry_after_seconds,
            self.effective_rate,
        )
        return self.effective_rate
