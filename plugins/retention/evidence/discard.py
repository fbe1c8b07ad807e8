"""Dead letters reviewed and discarded: a recorded decision that they will not be replayed.

A dead operation stays dead: discarding changes nothing in ``retention.operations``
and deletes nothing. It writes one ``retention.discards`` row per operation (who,
when, an optional note, and the moment it went dead), and from then on the
operation is *explained*: it leaves the default dead-letter list, the alerts no
longer count it as a new dead letter, and reconcile counts its row as
``discarded`` rather than as overdue backlog.

There is no silent undo. The one way back is a replay, itself recorded in
``retention.replays``: it moves the operation to pending, which ends the discard
(the discard holds for the dead episode it names by ``dead_since``) and keeps
its row as history.
"""

from __future__ import annotations

from typing import Any

from retention.db.connection import Connection
from retention.db.sqlfiles import query

MAX_NOTE_CHARS = 2000  # a note is a sentence or two, kept with the evidence


def discard_dead(
    conn: Connection,
    *,
    operation_keys: list[str],
    policies: list[str],
    discarded_by: str,
    note: str | None = None,
) -> list[dict[str, Any]]:
    """Record ``operation_keys`` that are dead operations of ``policies`` (and not discarded
    already) as discarded by ``discarded_by``; returns the rows recorded (operation_key,
    policy, discarded_at). Keys that are not dead, or of other policies, are left alone."""
    text = (note or "").strip()[:MAX_NOTE_CHARS] or None
    return conn.execute(
        query("dead_letter_discard"),
        {
            "keys": sorted(set(operation_keys)),
            "policies": policies,
            "discarded_by": discarded_by,
            "note": text,
        },
    ).fetchall()
