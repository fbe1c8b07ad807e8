"""The README's bad-input catalogue stays true: enough rows, and every test it names exists."""

from __future__ import annotations

import re

from tests.support.env import ROOT


def catalogue() -> list[tuple[str, str]]:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Bad-input catalogue") : readme.index("## Development")]
    return re.findall(r"`(test_[a-z0-9_]+)` \(([^)]+)\)", section)


def test_the_catalogue_has_at_least_forty_inputs() -> None:
    assert len(catalogue()) >= 40


def test_every_test_the_catalogue_names_exists() -> None:
    missing = [
        f"{path}::{name}"
        for name, path in catalogue()
        if f"def {name}(" not in (ROOT / "tests" / path).read_text()
    ]
    assert missing == []
