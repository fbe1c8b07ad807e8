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
    "policy": 1,
    "db": 2,
    "metrics": 2,
    "rows": 3,
    "queue": 3,
    "objects": 4,
    "events": 4,
    "evidence": 5,
    "airflow": 6,
    "cli": 6,
    "ui": 6,  # the Retention view (api-server pages), beside the Airflow layer
}
# Siblings of one rank that must not know each other.
FORBIDDEN = {("rows", "queue"), ("queue", "rows"), ("objects", "events")}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
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
