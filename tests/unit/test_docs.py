"""The documentation stays navigable: the README is a front page, every page of docs/ is
in the site's nav, the README's links lead somewhere, and the strict build that CI runs
(``make docs-build``) really fails on a broken link or anchor."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.docs import DOCS_DIR
from tests.support.env import ROOT

README_MAX_LINES = 250
MKDOCS_YML = ROOT / "mkdocs.yml"


class _TaggedLoader(yaml.SafeLoader):
    """mkdocs.yml as plain data: a ``!!python/name:`` tag (the mermaid fence) read as text."""


_TaggedLoader.add_multi_constructor(
    "tag:yaml.org,2002:python/", lambda loader, suffix, node: f"!!python/{suffix}"
)


def mkdocs_config() -> dict[str, Any]:
    return yaml.load(MKDOCS_YML.read_text(), Loader=_TaggedLoader)  # a SafeLoader subclass


def nav_pages(nav: list[Any]) -> list[str]:
    """The page files of the nav, in order, sections flattened."""
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(nav_pages(value) if isinstance(value, list) else [value])
    return pages


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; move reference text to a page of docs/"
    )


def test_the_readme_states_the_test_command() -> None:
    """CI (.ci/run) runs the README's test command; the README must say what it is."""
    assert re.search(r"^make test\b", (ROOT / "README.md").read_text(), flags=re.MULTILINE)


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    config = mkdocs_config()
    assert config["docs_dir"] == "docs"
    listed = nav_pages(config["nav"])
    pages = sorted(path.relative_to(DOCS_DIR).as_posix() for path in DOCS_DIR.rglob("*.md"))
    assert sorted(listed) == pages
    assert len(set(listed)) == len(listed), "a page is listed twice"


def test_the_site_is_built_outside_the_tree_with_strict_link_checks() -> None:
    config = mkdocs_config()
    assert config["site_dir"].startswith(".local/"), "builds must leave no files in the tree"
    assert config["strict"] is True
    assert config["validation"]["links"]["anchors"] == "warn"  # strict turns warnings into errors
    assert config["validation"]["links"]["not_found"] == "warn"
    assert config["validation"]["nav"]["omitted_files"] == "warn"


def test_every_relative_link_of_the_readme_leads_to_a_file() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = [
        target.partition("#")[0]
        for target in re.findall(r"\]\(([^)\s]+)\)", readme)
        if not re.match(r"[a-z]+:|#", target)
    ]
    assert targets, "the README links into docs/"
    missing = [target for target in targets if not (ROOT / target).is_file()]
    assert missing == []


def build_site_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, break_anchor: bool) -> None:
    """Build a copy of the site with ``--strict``, optionally with one broken in-site anchor."""
    config_module = pytest.importorskip("mkdocs.config", reason="mkdocs is a dev dependency")
    from mkdocs.commands.build import build

    shutil.copytree(DOCS_DIR, tmp_path / "docs")
    for name in ("mkdocs.yml", "BENCHMARKS.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    if break_anchor:
        page = tmp_path / "docs" / "alerts.md"
        page.write_text(page.read_text() + "\nSee [nowhere](runbook.md#no-such-section).\n")
    monkeypatch.chdir(tmp_path)  # the snippets' base path is the project root
    build(config_module.load_config(str(tmp_path / "mkdocs.yml"), site_dir=str(tmp_path / "site")))


def test_the_strict_build_passes_on_the_docs_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_site_copy(tmp_path, monkeypatch, break_anchor=False)
    assert (tmp_path / "site" / "runbook" / "index.html").is_file()


def test_the_strict_build_fails_on_a_broken_anchor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exceptions = pytest.importorskip("mkdocs.exceptions", reason="mkdocs is a dev dependency")
    with pytest.raises(exceptions.Abort, match="warning"):
        build_site_copy(tmp_path, monkeypatch, break_anchor=True)


def page_table(text: str, prefix: str) -> list[str]:
    """The rows of a page's table of pages, with the link prefix taken off."""
    return [
        line.replace(f"]({prefix}", "](") for line in text.splitlines() if line.startswith("| [")
    ]


def mermaid_blocks(text: str) -> list[str]:
    return re.findall(r"```mermaid\n(.*?)```", text, flags=re.S)


def test_the_site_home_and_the_readme_show_the_same_pages_and_diagram() -> None:
    """The README (GitHub's front page) and docs/index.md (the site's) are kept apart so
    each link works where it is read; what they show must not drift apart."""
    readme = (ROOT / "README.md").read_text()
    index = (DOCS_DIR / "index.md").read_text()
    # The README links BENCHMARKS.md itself; the site shows it as its benchmarks page.
    readme = readme.replace("](BENCHMARKS.md)", "](docs/benchmarks.md)")
    assert page_table(readme, "docs/") == page_table(index, "")
    assert page_table(index, ""), "the site's home lists its pages"
    assert mermaid_blocks(readme) == mermaid_blocks(index) != []
