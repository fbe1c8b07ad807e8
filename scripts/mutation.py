"""`make mutation`: mutation testing of the pure modules with mutmut (not part of CI).

mutmut derives module names from file paths under ``./`` or ``src/``, while the
package lives in ``plugins/``. So this builds a staging copy under
``.local/mutation`` with the package at ``src/retention`` (and the project
files the unit tests read), runs ``mutmut run`` there against ``tests/unit``,
and prints the score: killed mutants ÷ all mutants. Figures also go to
``.local/bench/mutation-*.json`` with the git SHA.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from benchlib import ROOT, record

STAGE = ROOT / ".local" / "mutation"
PURE_MODULES = [
    "rows/cutoff.py",
    "rows/windows.py",
    "queue/classify.py",
    "queue/decisions.py",
    "policy/params.py",
    "policy/model.py",
    "policy/loader.py",
    "runs/status.py",
    "alerts/messages.py",
]
# What the unit tests read besides the package: the docs and the site's config, the
# scripts and devtools they check (which start the package from plugins/, unmutated),
# the Astro project's files.
COPIED_FOLDERS = ("include", "tests", "docs", "devtools", "scripts", "dags", "plugins")
COPIED_FILES = (
    "README.md",
    "BENCHMARKS.md",
    "Makefile",
    "mkdocs.yml",
    "airflow_settings.yaml",
    "Dockerfile",
    ".dockerignore",
    "packages.txt",
    "requirements.txt",
    "requirements-dev.txt",
    "constraints.txt",
)
PYPROJECT = """
[tool.pytest.ini_options]
testpaths = ["tests/unit"]
pythonpath = ["src", "."]
addopts = "-q -p no:cacheprovider"
filterwarnings = ["ignore::DeprecationWarning"]

[tool.mutmut]
paths_to_mutate = [{paths}]
also_copy = [{copied}]
# The unit tests of the local scripts start make and the dev services: they test no pure
# module, and need the checkout's .local/env.
pytest_add_cli_args_test_selection = [
    "tests/unit",
    "--ignore=tests/unit/test_dev_services.py",
    "--ignore=tests/unit/test_first_hour_commands.py",
]
"""


def stage() -> None:
    if STAGE.exists():
        shutil.rmtree(STAGE)
    (STAGE / "src").mkdir(parents=True)
    shutil.copytree(ROOT / "plugins" / "retention", STAGE / "src" / "retention")
    for name in COPIED_FOLDERS:
        shutil.copytree(ROOT / name, STAGE / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in COPIED_FILES:
        shutil.copy(ROOT / name, STAGE / name)
    paths = ", ".join(f'"src/retention/{module}"' for module in PURE_MODULES)
    copied = ", ".join(f'"{name}"' for name in ("src", *COPIED_FOLDERS, *COPIED_FILES))
    (STAGE / "pyproject.toml").write_text(PYPROJECT.format(paths=paths, copied=copied))


def counts() -> dict[str, int]:
    """Mutant outcomes from mutmut's result files, read with mutmut's own status table."""
    from mutmut.stats import status_by_exit_code

    found: Counter[str] = Counter()
    for meta in (STAGE / "mutants").rglob("*.meta"):
        for code in json.loads(meta.read_text()).get("exit_code_by_key", {}).values():
            found[status_by_exit_code[code]] += 1
    return dict(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-children", type=int, default=2)
    args = parser.parse_args()
    stage()
    mutmut = Path(sys.executable).parent / "mutmut"
    subprocess.run(
        [str(mutmut), "run", "--max-children", str(args.max_children)], cwd=STAGE, check=True
    )
    found = counts()
    total = sum(found.values())
    score = found.get("killed", 0) / total if total else 0.0
    print(f"\nmutants: {total}; " + ", ".join(f"{k} {v}" for k, v in found.items()))
    print(f"mutation score (killed / all): {score:.1%} (target >= 85%)")
    survivors = subprocess.run(
        [str(mutmut), "results"], cwd=STAGE, capture_output=True, text=True, check=False
    ).stdout
    print("survivors (inspect with `cd .local/mutation && mutmut show <name>`):")
    print(survivors)
    record("mutation", {"modules": PURE_MODULES}, {"counts": found, "score": score})


if __name__ == "__main__":
    main()
