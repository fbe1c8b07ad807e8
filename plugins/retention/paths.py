"""Where the project's files live: the policies file, the SQL files, the settings.

The package sits in ``plugins/retention`` of an Astro project, so the project
root is two folders up in every deployment (local, Astro, MWAA, Composer).
"""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INCLUDE_DIR = PROJECT_ROOT / "include"
SQL_DIR = INCLUDE_DIR / "sql"
DEFAULT_POLICIES_PATH = INCLUDE_DIR / "retention_policies.yaml"
POLICY_SCHEMA_PATH = INCLUDE_DIR / "retention_policies.schema.json"
AIRFLOW_SETTINGS_PATH = PROJECT_ROOT / "airflow_settings.yaml"
