"""The run summary is read typed: consumers use :class:`RunSummary` attributes, never the
stored JSON by key, and the SQL they run selects ``retention.runs.summary`` whole.

A consumer that indexed the JSON (``summary["covered_by"]``, ``rows.get("status")``)
would read a renamed or missing figure as ``None`` without a word; through
:meth:`RunSummary.from_stored` it is a type error (and an older summary's missing key
its default). Two checks, each precise about what it catches:

- In the consumer modules, no subscript or ``.get`` (``.pop``, ``.setdefault``) read on
  a name or attribute called ``*summary*``, whatever the key (``summary[k]`` with ``k``
  from a tuple of keys too), and no read with a constant key that only the summary's
  JSON has (its field names that no column of ``retention`` and no other JSON this
  package writes uses) on anything at all. A dict called otherwise read with a key the
  summary shares with rows (``media["status"]``) is beyond it: no AST can tell that dict
  from a row without types.
- In ``include/sql``, no statement but the write path reads into the JSON
  (``summary ->`` / ``summary ->>``), and none builds or changes it: the only values
  assigned to the column are a bound parameter (the JSON :class:`RunSummary` wrote) or
  NULL (a run planned afresh).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import retention
from retention.paths import SQL_DIR
from retention.summary import RunSummary

PACKAGE = Path(retention.__file__).resolve().parent
ROOT = PACKAGE.parent.parent
CONSUMERS = sorted(
    [
        PACKAGE / "evidence" / "report.py",
        PACKAGE / "evidence" / "lookup.py",
        PACKAGE / "cli.py",
        PACKAGE / "metrics.py",
        PACKAGE / "airflow" / "alerts.py",
        *(PACKAGE / "ui").glob("*.py"),
        *(PACKAGE / "alerts").glob("*.py"),
        ROOT / "scripts" / "demo.py",
    ]
)
# Summary keys that other rows and JSON share (a column of retention.runs or
# retention.windows, a key of an erasure or a delivery): a subscript with one of them
# is no sign of a summary by itself. Every other field name is the summary's alone.
SHARED_KEYS = {
    "run_kind",
    "policy",
    "dag_id",
    "run_id",
    "plan_id",
    "table",
    "status",
    "dry_run",
    "cutoff",
    "anchor_source",
    "logical_date",
    "windows",
    "rows_planned",
    "rows_deleted",
    "rows_counted",
    "rows_remaining",
    "rows_outside_windows",
    "plan_seconds",
    "delete_seconds",
    "longest_batch_ms",
    "reconcile_seconds",
    "plan_notes",
    "partitions",
    "pauses",
    "paused_seconds",
    "pause_reasons",
    "rows_held",
    "objects_held",
    "rows_deleted_by_table",  # a window's and an erasure's figure too
    "remote",
    "drain",
    "events",
    "reason",
    "windows_by_state",  # a column of run_recent.sql and ui_runs.sql
    "partial",
}
SUMMARY_ONLY_KEYS = {f.name for f in dataclasses.fields(RunSummary)} - SHARED_KEYS
# SQL that may read into the stored JSON, and why (none: every reader selects it whole).
READS_THE_JSON: dict[str, str] = {}
SUMMARY_READ = re.compile(r"\bsummary\s*->", re.IGNORECASE)
SUMMARY_SET = re.compile(r"\bsummary\s*=(?!\s*(?:%\(summary\)s|NULL\b))", re.IGNORECASE)


def _named_summary(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return "summar" in name.lower()


def _key(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def key_reads(source: str) -> list[str]:
    """``line: text`` of every read of a summary by key in ``source`` (see the module)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            target, key = node.value, node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault")
            and node.args
        ):
            target, key = node.func.value, node.args[0]
        else:
            continue
        # On a summary, any key (a constant, or a name holding one); on anything else, a
        # key only the summary's JSON has.
        if _named_summary(target) or _key(key) in SUMMARY_ONLY_KEYS:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_check_sees_what_it_is_for() -> None:
    """Each reading the audit found (before the summary was read typed) is caught; reading
    a row's column called summary, a summary's attribute, or a row's column is not."""
    caught = [
        "summary.get(COVERED_KEY)",
        "{k: summary[k] for k in FIRST_KEYS if k in summary}",
        "summary['status']",
        "summary.get('events')",
        "self.summary['rows_deleted']",
        "summary.get('rows_deleted_by_table') or {}",
        "media.get('covered_by')",  # a name that hides it: the key is the summary's alone
        "row['rate_limit_headers_note']",
        "ordered.get('rows_planned_is_estimate')",
    ]
    assert [line for line in caught if not key_reads(line)] == []
    for fine in (
        "row['summary']",
        "summary.status",
        "row['status']",
        "rows.get('windows')",
        "ordered['covered_by'] = note",  # a row the report lays out, not a read
    ):
        assert key_reads(fine) == [], fine


def test_no_consumer_reads_the_summary_by_key() -> None:
    found = {
        str(path.relative_to(ROOT)): reads
        for path in CONSUMERS
        if (reads := key_reads(path.read_text()))
    }
    assert found == {}, "read the summary through RunSummary.from_stored and its attributes"


def test_only_the_write_path_touches_the_summary_json_in_sql() -> None:
    reads = sorted(
        path.name
        for path in SQL_DIR.glob("*.sql")
        if SUMMARY_READ.search(path.read_text()) and path.name not in READS_THE_JSON
    )
    assert reads == [], "select r.summary whole and read it with RunSummary.from_stored"
    built = sorted(
        path.name for path in SQL_DIR.glob("*.sql") if SUMMARY_SET.search(path.read_text())
    )
    assert built == [], "RunSummary builds the JSON (RunSummary.stopped for a partial one)"
