"""Where the project's files live: the policies file, the SQL files, the settings.

The package sits in ``plugins/retention`` of an Astro project, so the project
root is two folders up in every deployment (local, Astro, MWAA, Composer).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INCLUDE_DIR = PROJECT_ROOT / "include"
SQL_DIR = INCLUDE_DIR / "sql"
DEFAULT_POLICIES_PATH = INCLUDE_DIR / "retention_policies.yaml"
POLICY_SCHEMA_PATH = INCLUDE_DIR / "retention_policies.schema.json"
AIRFLOW_SETTINGS_PATH = PROJECT_ROOT / "airflow_settings.yaml"
LOCAL_ENV_PATH = PROJECT_ROOT / ".local" / "env"
# The documentation pages that hold generated blocks (``make schema`` rewrites them).
DOCS_DIR = PROJECT_ROOT / "docs"
POLICIES_PAGE = DOCS_DIR / "policies.md"  # the field table
RUNS_PAGE = DOCS_DIR / "runs.md"  # the DAG steps


def load_local_env(path: Path = LOCAL_ENV_PATH) -> bool:
    """Export a checkout's ``.local/env`` (written by ``make env``) into this process.

    So ``python -m retention.cli`` and the tests work without ``set -a; . .local/env``
    first. Variables already set win (an operator's ``AIRFLOW_CONN_*`` is never
    overridden). Returns False when there is no such file: on Astro and in any
    deployment, where settings come from the environment alone.
    """
    if not path.is_file():
        return False
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        key, _, value = line.partition("=")
        if not key or key.startswith("#") or key in os.environ:
            continue
        words = shlex.split(value)  # the file holds shell-quoted values, one word each
        if len(words) > 1:
            raise ValueError(
                f"{path}:{number}: {key}'s value is {len(words)} words; quote it as one"
            )
        os.environ[key] = words[0] if words else ""
    return True
