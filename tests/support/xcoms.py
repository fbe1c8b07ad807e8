"""What a DAG run stored as XCom, read from the test's metadata database."""

from __future__ import annotations

from collections import Counter


def xcoms_per_task(dag_id: str, run_id: str) -> Counter[tuple[str, int]]:
    """How many XCom rows each task instance (task id, map index) of the run wrote."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return Counter(
            (x.task_id, x.map_index)
            for x in session.query(XComModel).filter(
                XComModel.dag_id == dag_id, XComModel.run_id == run_id
            )
        )
