"""The documentation pages as text, for the tests that keep them true.

The reference moved from the README to ``docs/`` (built by MkDocs, ``mkdocs.yml``);
tests that check a section read the page that holds it, by its file name.
"""

from __future__ import annotations

import re

from tests.support.env import ROOT

DOCS_DIR = ROOT / "docs"
HEADING = re.compile(r"^(#{1,6}) ")


def docs_page(name: str) -> str:
    """The text of ``docs/<name>`` (``name`` with or without ``.md``)."""
    return (DOCS_DIR / (name if name.endswith(".md") else f"{name}.md")).read_text()


def section(text: str, heading: str) -> str:
    """The lines from ``heading`` (a whole line, e.g. ``## Runbook``) up to the next heading
    of its level or higher, or the end; a ``#`` line inside a fenced code block is code."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines(keepends=True)
    starts = [n for n, line in enumerate(lines) if line.rstrip("\n") == heading]
    if not starts:
        raise ValueError(f"no heading {heading!r}")
    start = starts[0]
    fenced = False
    for n in range(start + 1, len(lines)):
        if lines[n].lstrip().startswith("```"):
            fenced = not fenced
        found = HEADING.match(lines[n])
        if found and not fenced and len(found.group(1)) <= level:
            return "".join(lines[start:n])
    return "".join(lines[start:])
