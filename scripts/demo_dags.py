"""Unpause the demo policies' DAGs once Airflow has parsed them (``make airflow``).

Airflow creates every new DAG paused (``[core] dags_are_paused_at_creation``), so
a first ``make airflow`` showed two DAGs that never ran. ``dev_services.py
--unpause-demo`` starts this script next to ``airflow standalone``: it waits until
the dag-processor has stored ``retention__event_logs`` and
``retention__media_assets``, unpauses them, and says so in one line; and
``retention__replay`` too, which runs only when triggered (a replay started from
the Retention view would otherwise wait, queued, behind the pause). It touches
these three DAGs only, and only with the shipped policies file: a checkout that
points ``RETENTION_POLICIES`` elsewhere keeps every DAG as Airflow made it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT)]

from retention.paths import DEFAULT_POLICIES_PATH  # noqa: E402

DEMO_DAG_IDS = ("retention__event_logs", "retention__media_assets")
REPLAY_DAG_ID = "retention__replay"  # schedule=None: unpaused, it runs only when triggered


def uses_shipped_policies() -> bool:
    chosen = os.environ.get("RETENTION_POLICIES")
    return not chosen or Path(chosen).resolve() == DEFAULT_POLICIES_PATH.resolve()


def unpause_when_parsed(
    dag_ids: tuple[str, ...], wait_seconds: float
) -> tuple[list[str], list[str]]:
    """Wait (up to ``wait_seconds``) until every DAG of ``dag_ids`` is stored, then unpause
    the paused ones. Returns the DAGs unpaused now and those never seen."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    deadline = time.monotonic() + wait_seconds
    while True:
        with create_session() as session:
            stored = session.scalars(select(DagModel).where(DagModel.dag_id.in_(dag_ids))).all()
            if len(stored) == len(dag_ids) or time.monotonic() > deadline:
                unpaused = sorted(dag.dag_id for dag in stored if dag.is_paused)
                for dag in stored:
                    dag.is_paused = False
                missing = sorted(set(dag_ids) - {dag.dag_id for dag in stored})
                return unpaused, missing
        time.sleep(2)


def login_line() -> str:
    """Where the UI's password is: the simple auth manager writes it to a file in the Airflow
    home and, with users configured (``make env`` adds the pool reader), prints none."""
    home = Path(os.environ.get("AIRFLOW_HOME", ".local/airflow"))
    passwords = home / "simple_auth_manager_passwords.json.generated"
    return (
        f"log in at {os.environ.get('AIRFLOW__API__BASE_URL', 'http://localhost:8080')} as "
        f"admin, with the password in {passwords}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wait", type=float, default=600, help="seconds to wait for the DAGs to be parsed"
    )
    args = parser.parse_args(argv)
    names = ", ".join((*DEMO_DAG_IDS, REPLAY_DAG_ID))
    if not uses_shipped_policies():
        print(
            f"dev_services: RETENTION_POLICIES names another policies file; {names} "
            "are not unpaused, and new DAGs start paused",
            flush=True,
        )
        return 0
    unpaused, missing = unpause_when_parsed((*DEMO_DAG_IDS, REPLAY_DAG_ID), args.wait)
    if unpaused:
        print(
            f"dev_services: unpaused {', '.join(unpaused)} (Airflow creates new DAGs paused; "
            "these are the demo's own). Pause them in the UI, or `airflow dags pause <dag id>`",
            flush=True,
        )
    print(f"dev_services: {login_line()}", flush=True)
    if missing:
        print(
            f"dev_services: {', '.join(missing)} not parsed within {args.wait:g} s; see the "
            "dag-processor's lines above, then unpause them in the UI",
            flush=True,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
