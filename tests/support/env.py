"""The local settings `make env` writes to `.local/env`, loaded into this process.

Only the integration, DAG and end-to-end tiers need them; unit tests run on
a fresh clone with nothing there.
"""

from __future__ import annotations

import os
from pathlib import Path

from retention.paths import load_local_env as load_checkout_env

ROOT = Path(__file__).resolve().parents[2]
ENV_FILE = ROOT / ".local" / "env"


def load_local_env() -> bool:
    """Export `.local/env` (without overriding what is already set); False when absent."""
    return load_checkout_env(ENV_FILE)


def clean_pytest_environment(**extra: str) -> dict[str, str]:
    """This process's environment for a pytest started in a subprocess, plus ``extra``.

    Without the parent's pytest settings (``PYTEST_ADDOPTS``, ``PYTEST_PLUGINS``, the
    ``PYTEST_CURRENT_TEST`` of the test that starts it, …): a developer's
    ``PYTEST_ADDOPTS="-x -q"`` would otherwise change what the inner run reports.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    return {**env, **extra}
