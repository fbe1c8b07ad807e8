"""The SQL the docs give operators runs as written, from psql and from Python."""

from __future__ import annotations

import datetime as dt
import re

import psycopg
import pytest

from retention.db.connection import Connection
from tests.support.docs import DOCS_DIR, docs_page


def docs_query(table: str) -> str:
    """The docs' ```sql block that reads ``table`` (one in all the pages)."""
    pages = "\n".join(path.read_text() for path in sorted(DOCS_DIR.glob("*.md")))
    blocks = re.findall(r"```sql\n(.*?)```", pages, flags=re.DOTALL)
    found = [block for block in blocks if f"FROM {table}" in block]
    assert len(found) == 1, f"the docs have {len(found)} sql blocks reading {table}"
    return "\n".join(line.strip() for line in found[0].splitlines())


def test_the_rate_limiters_query_loads_into_python(db: Connection, unique_name: str) -> None:
    fresh, throttled = f"{unique_name}_fresh", f"{unique_name}_throttled"
    for scope in (fresh, throttled):
        db.execute(
            "INSERT INTO retention.rate_limiters (scope, rate_ceiling, effective_rate, min_rate, "
            "burst, tokens) VALUES (%s, 20, 20, 0.1, 20, 20)",
            (scope,),
        )
    closed = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
    db.execute(
        "UPDATE retention.rate_limiters SET closed_until = %s, last_decrease_at = %s, "
        "effective_rate = 10 WHERE scope = %s",
        (closed, closed, throttled),
    )
    with pytest.raises(psycopg.DataError):  # what the README once suggested
        db.execute("SELECT * FROM retention.rate_limiters WHERE scope = %s", (fresh,)).fetchall()

    rows = {row["scope"]: row for row in db.execute(docs_query("retention.rate_limiters"))}
    assert rows[fresh]["closed_until"] is None
    assert rows[fresh]["last_decrease_at"] is None
    assert rows[throttled]["closed_until"] == closed
    assert float(rows[throttled]["effective_rate"]) == 10.0
    assert float(rows[fresh]["tokens"]) == 20.0


def test_the_runbooks_sql_runs(db: Connection, unique_name: str) -> None:
    """Every statement of the runbook, placeholders filled, in a rolled-back transaction."""
    blocks = re.findall(r"```sql\n(.*?)```", docs_page("runbook"), flags=re.DOTALL)
    assert len(blocks) >= 4
    for block in blocks:
        text = block.replace("<policy>", unique_name).replace("<run id>", "manual__x")
        for statement in filter(str.strip, text.split(";")):
            with db.transaction(force_rollback=True):
                cursor = db.execute(statement)
                if cursor.description is not None:
                    cursor.fetchall()
