"""The DAG's steps are written once: the DAG docs in the UI and the DAG section of
docs/runs.md number the same tasks the same way, and the page's list is the generated one."""

from __future__ import annotations

import re

from retention.airflow.dag_factory import build_dag
from retention.policy import load_policies
from tests.support.docs import docs_page, section

DAG_SECTION = "## The DAG: `retention__<policy>`"


def dag_section() -> str:
    return section(docs_page("runs"), DAG_SECTION)


def numbered(text: str) -> list[tuple[int, str]]:
    """``N. `task``` (the DAG docs) or ``N. **`task`**`` (docs/runs.md) items, in order."""
    return [
        (int(n), task) for n, task in re.findall(r"^(\d+)\. \**`(\w+)`", text, flags=re.MULTILINE)
    ]


def test_the_dag_docs_and_the_runs_page_number_the_same_steps() -> None:
    policy = load_policies().policies[0]
    dag_doc = build_dag(policy, auto_register=False).doc_md or ""
    assert numbered(dag_doc), "the DAG docs list their steps"
    assert numbered(dag_section()) == numbered(dag_doc)


def test_the_runs_page_dag_steps_are_the_generated_ones() -> None:
    from retention.airflow.dag_docs import DOC_STEPS_END, DOC_STEPS_START, doc_steps

    text = dag_section()
    generated = text[text.index(DOC_STEPS_START) + len(DOC_STEPS_START) :]
    generated = generated[: generated.index(DOC_STEPS_END)]
    assert generated.strip() == doc_steps(), "run `make schema`"
