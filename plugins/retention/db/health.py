"""Read the database's health and judge it against a policy's ``health:`` limits.

The readings are what the tools operators trust watch (pt-archiver's replica
lag, gh-ost's pause and critical-load thresholds, GitLab's autovacuum pause):
how far standbys are behind (in seconds and in bytes of WAL) and how many are
connected, the oldest transaction that holds back vacuum, autovacuum on the
target table, sessions waiting on our locks, and which other clients are at
work (gh-ost's ``--max-load Threads_running=N``), which paces the row deleter.
Reading is one statement (``health_check.sql``); judging is pure, so each rule
has a unit test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.policy.model import HealthSpec, TableSpec


@dataclass(frozen=True)
class HealthReading:
    """One look at the database (None: nothing to report for that reading)."""

    replica_lag_seconds: float | None = None
    replica_lag_bytes: int | None = None  # WAL between the primary and the furthest replay
    standbys: int = 0  # physical standbys connected now
    oldest_xact_pid: int | None = None
    oldest_xact_seconds: float | None = None
    autovacuum_pid: int | None = None
    blocked_sessions: int = 0
    active_clients: int = 0  # other sessions of the database at work in the last second
    # the same sessions by application_name (a reading may leave it empty)
    active_applications: Mapping[str, int] = field(default_factory=dict)
    role: str = ""  # the role the readings were taken as
    sees_all_sessions: bool = True  # False: other roles' sessions show no details to it
    hidden_sessions: int = 0  # sessions of this database whose details it could not see


@dataclass(frozen=True)
class Verdict:
    """What the deleters must do now: go on, pause (with why), or stop (with why)."""

    # replica_lag, standby_missing, xact_age, autovacuum, blocked_sessions, retention_pause
    kind: str | None = None
    reason: str | None = None
    abort: bool = False

    @property
    def clear(self) -> bool:
        return self.reason is None


CLEAR = Verdict()
HEALTH_CHECK_TIMEOUT_MS = 5_000  # a check that hangs must not outlast max_pause_seconds


def read_health(conn: Connection, table: TableSpec) -> HealthReading:
    """Read the health figures (read-only, bounded by HEALTH_CHECK_TIMEOUT_MS)."""
    where = {"schema": table.schema, "table": table.name}
    with conn.transaction():
        conn.execute(
            "SELECT set_config('statement_timeout', %s, true)", (f"{HEALTH_CHECK_TIMEOUT_MS}ms",)
        )
        row = conn.execute(query("health_check"), where).fetchone() or {}
    applications = {str(k): int(v) for k, v in (row.get("active_applications") or {}).items()}
    lag_bytes = row.get("replica_lag_bytes")
    return HealthReading(
        replica_lag_seconds=_float(row.get("replica_lag_seconds")),
        replica_lag_bytes=None if lag_bytes is None else int(lag_bytes),
        standbys=int(row.get("standbys") or 0),
        oldest_xact_pid=row.get("oldest_xact_pid"),
        oldest_xact_seconds=_float(row.get("oldest_xact_seconds")),
        autovacuum_pid=row.get("autovacuum_pid"),
        blocked_sessions=int(row.get("blocked_sessions") or 0),
        active_clients=sum(applications.values()),
        active_applications=applications,
        role=str(row.get("role") or ""),
        sees_all_sessions=bool(row.get("sees_all_sessions", True)),
        hidden_sessions=int(row.get("hidden_sessions") or 0),
    )


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def counted_clients(reading: HealthReading | None, spec: HealthSpec) -> int:
    """Other clients at work that count for pacing: those not named in
    ``ignore_applications``, so a monitoring agent or a pool's keep-alive does not
    make a quiet database look busy (pure)."""
    if reading is None:
        return 0
    ignored = sum(
        n for name, n in reading.active_applications.items() if name in spec.ignore_applications
    )
    return max(0, reading.active_clients - ignored)


def sleep_ratio(reading: HealthReading | None, spec: HealthSpec) -> float:
    """The share of each batch's time to sleep after it (pure).

    ``sleep_ratio`` always; ``busy_sleep_ratio`` instead when it is larger and
    at least ``busy_clients`` counted clients were at work at the last look, so
    a deleter runs flat out on a quiet database and leaves room to the
    application on a busy one.
    """
    busy = counted_clients(reading, spec) >= spec.busy_clients
    return max(spec.sleep_ratio, spec.busy_sleep_ratio if busy else 0.0)


def _bytes(value: float) -> str:
    """``5.0 GiB``: WAL sizes as people read them."""
    size, unit = float(value), "bytes"
    for larger in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024:
            break
        size, unit = size / 1024, larger
    return f"{size:,.0f} bytes" if unit == "bytes" else f"{size:,.1f} {unit}"


def _number(value: float) -> str:
    return f"{value:g}"


def judge(reading: HealthReading, spec: HealthSpec, table: str) -> Verdict:
    """The first abort that applies, else the first pause, else clear (pure)."""
    lag = reading.replica_lag_seconds
    lag_bytes = reading.replica_lag_bytes
    age = reading.oldest_xact_seconds
    blocked = reading.blocked_sessions
    lag_words = f"a standby replays {lag or 0:,.0f} s behind"
    bytes_words = f"a standby replays {_bytes(lag_bytes or 0)} of WAL behind"
    age_words = (
        f"transaction {reading.oldest_xact_pid} open for {age or 0:,.0f} s holds back vacuum"
    )
    blocked_words = f"{blocked} session(s) wait on locks held by retention sessions"
    readings = [  # (kind, value, words, pause limit, abort limit, how a limit reads)
        (
            "replica_lag",
            lag,
            lag_words,
            spec.max_replica_lag_seconds,
            spec.abort_replica_lag_seconds,
            _number,
        ),
        (
            "replica_lag",
            lag_bytes,
            bytes_words,
            spec.max_replica_lag_bytes,
            spec.abort_replica_lag_bytes,
            _bytes,
        ),
        (
            "xact_age",
            age,
            age_words,
            spec.max_xact_age_seconds,
            spec.abort_xact_age_seconds,
            _number,
        ),
        (
            "blocked_sessions",
            blocked,
            blocked_words,
            spec.max_blocked_sessions,
            spec.abort_blocked_sessions,
            _number,
        ),
    ]
    for kind, value, words, _, limit, shown in readings:
        if limit is not None and value is not None and value > limit:
            return Verdict(kind, f"{words} (abort limit {shown(limit)})", abort=True)
    if reading.standbys < spec.expected_standbys:
        return Verdict(
            "standby_missing",
            f"standby missing: {reading.standbys} of {spec.expected_standbys} expected "
            "standby(s) connected",
        )
    for kind, value, words, limit, _, shown in readings:
        if limit is not None and value is not None and value > limit:
            return Verdict(kind, f"{words} (limit {shown(limit)})")
    if spec.pause_on_autovacuum and reading.autovacuum_pid is not None:
        return Verdict(
            "autovacuum", f"a vacuum (pid {reading.autovacuum_pid}) is working on {table}"
        )
    return CLEAR


def describe_lock_waiters(conn: Connection, limit: int = 3) -> str:
    """Who waits on retention's locks, and on which retention PIDs (``lock_waiters.sql``):
    ``pid 4242 (psql, waiting 3.0 s: UPDATE …) on retention pid 77``; "" if none now."""
    rows = conn.execute(query("lock_waiters"), {"limit": limit}).fetchall()
    described = []
    for row in rows:
        statement = " ".join((row["query"] or "").split())[:100]
        holders = ", ".join(str(pid) for pid in row["blocked_by"])
        described.append(
            f"pid {row['pid']} ({row['application_name'] or 'no application_name'}, waiting "
            f"{float(row['waiting_seconds'] or 0):.1f} s: {statement}) on retention pid {holders}"
        )
    return "; ".join(described)
