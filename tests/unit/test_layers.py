"""The layout shows the design: dependencies point one way, and only the Airflow layer
imports Airflow (so every other layer's tests run without an Airflow home)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import retention

PACKAGE = Path(retention.__file__).resolve().parent
RANK = {
    "paths": 0,
    "progress": 0,  # log lines of long loops; imports nothing of the package
    "stopping": 0,
    "summary": 0,  # the typed run summary: reconcile writes it, metrics and alerts read it
    "policy": 1,
    "db": 2,
    "metrics": 2,
    "holds": 2,  # legal holds: the store, and the held-row predicate every reader embeds
    "runs": 3,  # the run lease and the run-status rule: the row lifecycle closes a stopped run
    "rows": 3,
    "queue": 3,
    "objects": 4,
    "events": 4,
    "evidence": 5,
    "erasures": 5,  # urgent erasures: through the rows' deleter and the objects' ledger
    "alerts": 5,  # the rules, the messages and the ledger; Airflow's side is airflow/alerts.py
    "airflow": 6,
    "cli": 6,
    "ui": 6,  # the Retention view (api-server pages), beside the Airflow layer
}
# Siblings of one rank that must not know each other (or know each other one way only:
# the rows' lifecycle uses the run lease, never the reverse; the Retention view builds on
# the Airflow layer's lookups and logins, never the reverse).
FORBIDDEN = {
    ("rows", "queue"),
    ("queue", "rows"),
    ("runs", "rows"),
    ("runs", "queue"),
    ("objects", "events"),
    ("evidence", "alerts"),
    ("alerts", "evidence"),
    ("airflow", "ui"),
}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, spelled absolute, with each name it takes from one:
    ``from retention import ui`` counts as ``retention.ui`` and ``from ..ui import app`` as
    ``retention.ui.app``, so no spelling of an import slips past the rules below."""
    tree = ast.parse(path.read_text())
    package = ["retention", *path.relative_to(PACKAGE).parent.parts]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join([*parts, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_every_module_belongs_to_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.name == "__init__.py" and len(relative.parts) == 1:
            continue
        assert relative.parts[0].removesuffix(".py") in RANK, relative


def test_dependencies_point_one_way() -> None:
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        mine = relative.parts[0].removesuffix(".py")
        if mine not in RANK:
            continue
        for module in imports_of(path):
            if not module.startswith("retention."):
                continue
            theirs = layer(module)
            if theirs == mine:
                continue
            if RANK[theirs] > RANK[mine] or (mine, theirs) in FORBIDDEN:
                wrong.append(f"{relative} imports {module}")
    assert wrong == []


def test_the_retention_view_builds_on_the_airflow_layer_never_the_reverse() -> None:
    """``ui/`` imports ``airflow/`` (its logins, lookups, API); ``airflow/`` never imports
    ``ui/``, by any spelling and not by name at run time, so parsing a DAG never loads
    the web app."""
    ui_uses = {
        module
        for path in (PACKAGE / "ui").rglob("*.py")
        for module in imports_of(path)
        if layer(module) == "airflow"
    }
    assert ui_uses, "the rule is one-way: ui/ builds on airflow/"
    wrong = []
    for path in (PACKAGE / "airflow").rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        wrong += [f"{relative} imports {m}" for m in imports_of(path) if layer(m) == "ui"]
        wrong += [
            f"{relative} names {node.value!r}"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("retention.ui")
        ]
    assert wrong == []


def test_only_the_airflow_layer_imports_airflow() -> None:
    code = (
        "import importlib, json, pkgutil, sys, retention\n"
        "for m in pkgutil.walk_packages(retention.__path__, 'retention.'):\n"
        "    if m.name.startswith('retention.airflow'):\n"
        "        continue\n"
        "    importlib.import_module(m.name)\n"
        "print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] == 'airflow')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(PACKAGE.parent), "PATH": "/usr/bin:/bin"},
    ).stdout
    assert json.loads(out) == []


def names_imported(path: Path, module: str) -> set[str]:
    """The names ``path`` imports from ``module`` (``from module import a, b``)."""
    tree = ast.parse(path.read_text())
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == module
        for alias in node.names
    }


def test_the_worker_knows_no_transport() -> None:
    """The queue loop claims, asks the kind to ``attempt``, and records what the kind decided:
    no HTTP result, no status table, no classifier of answers."""
    worker = PACKAGE / "queue" / "worker.py"
    assert "retention.queue.http" not in imports_of(worker)
    assert names_imported(worker, "retention.queue.classify") <= {"Classification", "Outcome"}
    assert not {"requests", "psycopg"} & {m.split(".")[0] for m in imports_of(worker)}


def test_the_decision_of_an_operation_is_pure() -> None:
    """``decide`` reads no database, no clock and no network: it is tested as a table."""
    decide = PACKAGE / "objects" / "decide.py"
    roots = {m.split(".")[0] for m in imports_of(decide)}
    assert not {"psycopg", "requests", "time"} & roots
    assert not any(m.startswith("retention.db") for m in imports_of(decide))


def test_the_shared_loop_and_the_objects_ledger_are_transport_free() -> None:
    """Only a kind's transport imports one: the leased queue, the worker, the objects'
    keys, decision, atomic finish and base kind work for a kind that is not HTTP."""
    free = [
        PACKAGE / "queue" / name
        for name in ("worker.py", "leased.py", "outage.py", "decisions.py", "limiter.py")
    ] + [PACKAGE / "objects" / name for name in ("keys.py", "decide.py", "finish.py")]
    wrong = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in free
        for module in imports_of(path)
        if module in {"retention.queue.http", "requests"}
    ]
    assert wrong == []


# Inside objects/, each module may use only those before it: the kind is built from the
# keys, the decision and the finish, never the other way round.
OBJECTS_ORDER = ("keys", "decide", "enqueue", "finish", "kind", "deleter")


def test_inside_objects_the_pieces_come_before_the_kind() -> None:
    wrong = []
    for position, name in enumerate(OBJECTS_ORDER):
        path = PACKAGE / "objects" / f"{name}.py"
        for module in imports_of(path):
            if module.startswith("retention.objects."):
                used = module.split(".")[2]
                if used not in OBJECTS_ORDER[:position]:
                    wrong.append(f"objects/{name}.py imports {module}")
    assert wrong == []
    modules = {p.stem for p in (PACKAGE / "objects").glob("*.py")} - {"__init__"}
    assert modules == set(OBJECTS_ORDER), "a new module of objects/ takes its place in the order"
