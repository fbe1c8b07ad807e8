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


def sections(doc: str) -> list[tuple[str, str]]:
    """(heading, body) of each Markdown heading of the doc, in order."""
    parts = re.split(r"^(#+ .*)$", doc, flags=re.MULTILINE)
    return [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts), 2)]


LEADING_ROWS = ["table", "retain_days", "cutoff", "owner", "pool"]


def test_the_docs_first_section_is_the_policy_the_steps_come_after() -> None:
    """An operator opening a DAG reads what it deletes, when, whose it is, what caps it
    and who hears of it before how the tasks do it."""
    for policy in load_policies().policies:
        doc = build_dag(policy, auto_register=False).doc_md or ""
        assert not doc[: doc.index("#")].strip(), "the doc opens with its first heading"
        (heading, first), *rest = sections(doc)
        assert f"`{policy.name}`" in heading, heading
        assert not numbered(first), f"{policy.name}: no step before the policy's settings"
        rows = re.findall(r"^\| ([^|]+?) \| .+ \|$", first, flags=re.MULTILINE)[1:]  # no header
        remote = ["remote", "rate limit"] if policy.remote else []
        assert rows[: len(LEADING_ROWS) + len(remote) + 1] == [*LEADING_ROWS, *remote, "alerts"]
        cutoff = re.search(r"^\| cutoff \| (.+) \|$", first, flags=re.MULTILINE)
        assert cutoff is not None
        assert f"`anchor − {policy.retain_days} days`" in cutoff.group(1)
        after = "".join(f"{title}\n{body}" for title, body in rest)
        assert numbered(doc), "the doc lists the steps"
        assert numbered(after) == numbered(doc), f"{policy.name}: the steps come after the policy"
