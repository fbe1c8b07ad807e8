"""The runbook (docs/runbook.md) keeps the headings others link to, and names only real things:
tables and views of the retention schema, CLI subcommands and options, the pause Variable."""

from __future__ import annotations

import re

from retention.cli import _parser
from retention.db.gate import PAUSE_VARIABLE
from tests.support.docs import docs_page
from tests.support.env import ROOT

HEADINGS = [
    "A dirty run",
    "An API outage",
    "Dead letters: replay or not",
    "A 410 receiver",
    "Restored rows",
    "Stopping and pausing a run",
    "Changing batch size and pool slots mid-flight",
    "Rotating secrets",
    "Moving a policy to a new table",
    "Placing and lifting a legal hold",
    "An erasure is late",
]


def runbook() -> str:
    return docs_page("runbook")


def test_the_runbook_has_exactly_the_linked_headings_in_order() -> None:
    assert re.findall(r"^## (.+)$", runbook(), flags=re.MULTILINE) == HEADINGS


def test_every_retention_relation_it_names_exists() -> None:
    migrations = "\n".join(
        path.read_text() for path in sorted((ROOT / "include" / "sql" / "migrations").glob("*.sql"))
    )
    created = set(
        re.findall(
            r"CREATE (?:TABLE IF NOT EXISTS|OR REPLACE VIEW|VIEW) retention\.(\w+)", migrations
        )
    )
    named = set(re.findall(r"\bretention\.(\w+)", runbook()))
    named -= {"deleted", "cli"}  # the event type retention.deleted, the module retention.cli
    assert named
    assert named <= created, sorted(named - created)


def test_every_cli_command_it_shows_exists() -> None:
    parser = _parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    shown = re.findall(r"python -m retention\.cli ([a-z-]+)((?: --?[a-z-]+)*)", runbook())
    assert shown
    for command, options in shown:
        assert command in commands, command
        known = {o for action in commands[command]._actions for o in action.option_strings}
        for option in options.split():
            assert option in known, (command, option)


def test_the_pause_switch_it_names_is_the_one_the_gate_reads() -> None:
    text = runbook()
    assert f"airflow variables set {PAUSE_VARIABLE} " in text
    assert f"airflow variables delete {PAUSE_VARIABLE}" in text
