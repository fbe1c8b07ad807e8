"""The local settings `make env` writes to `.local/env`, loaded into this process.

Only the integration, DAG and end-to-end tiers need them; unit tests run on
a fresh clone with nothing there.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV_FILE = ROOT / ".local" / "env"


def load_local_env() -> bool:
    """Export `.local/env` (without overriding what is already set); False when absent."""
    if not ENV_FILE.exists():
        return False
    for line in ENV_FILE.read_text().splitlines():
        key, _, value = line.partition("=")
        if key and key not in os.environ:
            os.environ[key] = shlex.split(value)[0] if value else ""
    return True
