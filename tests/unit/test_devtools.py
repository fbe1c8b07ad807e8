"""The demo, the benchmarks and ``devtools`` stand without the test suite, and the shipped
package stands without ``devtools``.

``tests/`` need not ship with the project for ``make demo`` or a benchmark to run, and
nothing the Astro image runs in production can reach a development tool.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.env import ROOT


def top_level_imports(path: Path) -> set[str]:
    """The top-level packages ``path`` imports, at any depth of its code (absolute only)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
    return found


def importers_of(package: str, paths: list[Path]) -> list[str]:
    return sorted(
        str(path.relative_to(ROOT)) for path in paths if package in top_level_imports(path)
    )


def test_scripts_and_devtools_import_nothing_from_tests() -> None:
    paths = sorted((ROOT / "scripts").glob("*.py")) + sorted((ROOT / "devtools").rglob("*.py"))
    assert len(paths) > 5, "the scripts and devtools were found"
    assert importers_of("tests", paths) == [], (
        "move what these need from tests/support into devtools/"
    )


def test_the_shipped_package_imports_nothing_from_devtools() -> None:
    paths = sorted((ROOT / "plugins").rglob("*.py")) + sorted((ROOT / "dags").rglob("*.py"))
    assert len(paths) > 5, "the package and the DAG files were found"
    assert importers_of("devtools", paths) == []
