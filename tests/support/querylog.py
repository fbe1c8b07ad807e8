"""The statements a connection sends, as their text: a query log kept on the client, for
tests that must tell which statement ran (the server's pg_stat_statements is not here)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from retention.db.connection import Connection

COMMENT = re.compile(r"--[^\n]*")


@contextmanager
def statements_sent(conn: Connection) -> Iterator[list[str]]:
    """Every statement ``conn`` sends while the block runs, without its SQL comments (the
    files' headers name tables their statements may not touch), in order."""
    sent: list[str] = []

    class LoggedCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            text = query.as_string(conn) if isinstance(query, sql.Composable) else str(query)
            sent.append(COMMENT.sub("", text))
            return super().execute(query, params, **kwargs)

    before = conn.cursor_factory
    conn.cursor_factory = LoggedCursor
    try:
        yield sent
    finally:
        conn.cursor_factory = before


def deletes_from(sent: list[str], table: str) -> list[str]:
    """The statements of ``sent`` that delete from ``public.<table>``."""
    target = sql.SQL("DELETE FROM {}").format(sql.Identifier("public", table)).as_string()
    return [text for text in sent if target in text]
