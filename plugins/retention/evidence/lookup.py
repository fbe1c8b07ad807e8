"""Find operations from what an operator has at hand, and the dead letters' failure classes.

An operator rarely holds a whole 64-digit operation key: a log line shows its
first digits, a support ticket names the object, a database row has its key.
:func:`find_operations` accepts any of them and returns a bounded list, so the
command line can explain the one match or list the candidates.
"""

from __future__ import annotations

import re
from typing import Any

from retention.db.connection import Connection
from retention.db.sqlfiles import query
from retention.summary import RunSummary

OPERATION_KEY = re.compile(r"[0-9a-f]{64}")
KEY_PREFIX = re.compile(r"[0-9a-f]{4,64}")
MAX_MATCHES = 20
ROW_KEY_LIMIT = 2**63 - 1  # row keys are bigint


def is_operation_key(term: str) -> bool:
    """A whole operation key (sha256 hex), as the ledger stores it."""
    return OPERATION_KEY.fullmatch(term) is not None


def find_operations(
    conn: Connection, term: str, *, policy: str | None = None, limit: int = MAX_MATCHES
) -> list[dict[str, Any]]:
    """Operations whose key starts with ``term``, or whose object id or row key is ``term``.

    A term can be several at once (``1234`` is a hex prefix and a row key), so every
    reading is tried; newest first, at most ``limit``. Key prefixes need at least
    four hex digits, so a short number is read as a row key only.
    """
    term = term.strip()
    if not term:
        raise ValueError("give an operation key, a key prefix, an object id or a row key")
    lowered = term.lower()
    prefix = lowered if KEY_PREFIX.fullmatch(lowered) else None
    row_key = int(term) if term.lstrip("-").isdigit() and abs(int(term)) <= ROW_KEY_LIMIT else None
    return conn.execute(
        query("explain_matches"),
        {"prefix": prefix, "term": term, "row_key": row_key, "policy": policy, "limit": limit},
    ).fetchall()


def dead_failure_classes(conn: Connection, *, policy: str | None = None) -> list[dict[str, Any]]:
    """Failure classes of dead operations with their counts, most common first."""
    return conn.execute(query("explain_failure_classes"), {"policy": policy}).fetchall()


def recent_runs(
    conn: Connection, *, policy: str | None = None, limit: int = 10
) -> list[dict[str, Any]]:
    """The latest runs, newest first, with their progress and who holds the run lease;
    ``summary`` is the run's :class:`RunSummary` (None until reconcile or a stop)."""
    rows = conn.execute(query("run_recent"), {"policy": policy, "limit": limit}).fetchall()
    return [{**row, "summary": RunSummary.from_stored(row["summary"])} for row in rows]
