"""The local settings `make env` writes to `.local/env`, loaded into this process.

Only the integration, DAG and end-to-end tiers need them; unit tests run on
a fresh clone with nothing there.
"""

from __future__ import annotations

from pathlib import Path

from retention.paths import load_local_env as load_checkout_env

ROOT = Path(__file__).resolve().parents[2]
ENV_FILE = ROOT / ".local" / "env"


def load_local_env() -> bool:
    """Export `.local/env` (without overriding what is already set); False when absent."""
    return load_checkout_env(ENV_FILE)
