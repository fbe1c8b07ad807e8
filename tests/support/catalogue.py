"""The bad-input catalogue (docs/bad-inputs.md) as data, and the rule that keeps its quotes true.

Each row of the table says what a user sees for one bad input. Backticked text
in the "what the user sees" column is a quote of what the code shows (an error
message, an HTTP answer's body, a ledger state, class or reason, the task that
fails); ``…`` inside a quote stands for omitted text. A status number written
just before a quote (``401 `signature check failed: …```) belongs to it: the
quote is then ``401 signature check failed: …``, matched against the status and
the body's ``detail`` of the real answer.

A *producer* feeds a row's input to the real code and returns what it showed,
as strings. Producers are registered by the row's input text, exactly as the
page writes it, so renaming an input or adding a row leaves a row without a
producer, which the catalogue tests report. The unit tier produces what needs
neither a database nor a server (tests/unit/test_bad_input_catalogue.py); the integration
tier the rest (tests/integration/test_bad_input_catalogue.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support.docs import docs_page, section

SECTION = "# Bad-input catalogue"
OMITTED = "…"
QUOTE = re.compile(r"(?:\b([1-5]\d\d) )?`([^`]+)`")


@dataclass(frozen=True)
class Row:
    """One row of the catalogue: kind | input | what the user sees | test."""

    kind: str
    input: str
    sees: str
    test: str

    @property
    def quotes(self) -> list[str]:
        """The backticked text of "what the user sees", each with its status number if any."""
        return [f"{status} {text}" if status else text for status, text in QUOTE.findall(self.sees)]


def catalogue_section() -> str:
    return section(docs_page("bad-inputs"), SECTION)


def rows() -> list[Row]:
    """The table's rows, in the page's order (the header and its rule left out)."""
    found: list[Row] = []
    for line in catalogue_section().splitlines():
        if not line.startswith("| ") or line.startswith(("| kind |", "|---")):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        assert len(cells) == 4, f"a catalogue row needs 4 cells: {line}"
        found.append(Row(*cells))
    return found


def quoting_rows() -> list[Row]:
    """The rows that quote something, each of which needs a producer."""
    return [row for row in rows() if row.quotes]


def pattern(quote: str) -> re.Pattern[str]:
    """The quote as a pattern: literal text, ``…`` standing for any text."""
    return re.compile(".*?".join(re.escape(part) for part in quote.split(OMITTED)), re.DOTALL)


def disagreements(quotes: list[str], shown: list[str]) -> list[str]:
    """What is wrong between a row's quotes and what the code showed; empty when they agree.

    Both ways: every quote is the whole of something the code showed (``…`` aside),
    and everything a producer reports is quoted (a producer reports only what the
    catalogue claims, one entry per input it feeds).
    """
    problems = [
        f"quoted but not shown: {quote!r}"
        for quote in quotes
        if not any(pattern(quote).fullmatch(text) for text in shown)
    ]
    problems += [
        f"shown but not quoted: {text!r}"
        for text in shown
        if not any(pattern(quote).fullmatch(text) for quote in quotes)
    ]
    return problems


Producer = Callable[..., list[str]]


class Producers(dict[str, Producer]):
    """Producers by the catalogue's input text, registered with ``@producers.of(input)``."""

    def of(self, *inputs: str) -> Callable[[Producer], Producer]:
        def register(produce: Producer) -> Producer:
            for text in inputs:
                assert text not in self, f"two producers for {text!r}"
                self[text] = produce
            return produce

        return register

    def rows(self) -> list[Row]:
        """The catalogue's rows these producers cover (ids for pytest's parametrize)."""
        return [row for row in quoting_rows() if row.input in self]


def row_id(row: Row) -> str:
    return re.sub(r"[^A-Za-z0-9_.:+-]+", "_", f"{row.kind}:{row.input}")[:80]


def answer_text(answer: Any) -> str:
    """An HTTP answer as the catalogue quotes it: the status, then the body's ``detail``."""
    try:
        detail = answer.json().get("detail")
    except ValueError:
        detail = answer.text
    return f"{answer.status_code} {detail}"
