"""The DAG's steps are written once: the DAG docs in the UI and the README's DAG section
number the same tasks the same way, and the README's list is the generated one."""

from __future__ import annotations

import re

from retention.airflow.dag_factory import build_dag
from retention.policy import load_policies
from tests.support.env import ROOT

README_SECTION = "## The DAG: `retention__<policy>`"


def readme_dag_section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index(README_SECTION)
    return readme[start : readme.index("\n## ", start + 1)]


def numbered(text: str) -> list[tuple[int, str]]:
    """``N. `task``` (the DAG docs) or ``N. **`task`**`` (the README) items, in order."""
    return [
        (int(n), task) for n, task in re.findall(r"^(\d+)\. \**`(\w+)`", text, flags=re.MULTILINE)
    ]


def test_the_dag_docs_and_the_readme_number_the_same_steps() -> None:
    policy = load_policies().policies[0]
    dag_doc = build_dag(policy, auto_register=False).doc_md or ""
    assert numbered(dag_doc), "the DAG docs list their steps"
    assert numbered(readme_dag_section()) == numbered(dag_doc)


def test_the_readme_dag_steps_are_the_generated_ones() -> None:
    from retention.airflow.dag_docs import README_STEPS_END, README_STEPS_START, readme_steps

    section = readme_dag_section()
    generated = section[section.index(README_STEPS_START) + len(README_STEPS_START) :]
    generated = generated[: generated.index(README_STEPS_END)]
    assert generated.strip() == readme_steps(), "run `make schema`"
