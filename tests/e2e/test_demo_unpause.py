"""`make airflow` unpauses the demo policies' DAGs (and the manual-only replay DAG) once
Airflow has stored them.

Airflow creates new DAGs paused, so the demo's two DAGs never ran until someone
found the toggle. The test stores them paused (``airflow dags reserialize`` with
the shipped policies file, as the dag-processor would), runs the ``airflow``
recipe of the Makefile with a stand-in for ``airflow standalone``, and waits for
the line that says they were unpaused; the metadata database must agree. They
are paused again afterwards, as reserialize makes them, so no scheduler of another
test runs them.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support.env import ROOT

DEMO_DAG_IDS = ("retention__event_logs", "retention__media_assets", "retention__replay")
STAND_IN = [sys.executable, "-c", "import time; time.sleep(120)"]


def airflow_recipe() -> list[str]:
    """The words of the Makefile's ``airflow`` recipe after ``$(RUN)``, without ``exec``."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    recipe = lines[lines.index("airflow: env") + 1]
    words = shlex.split(recipe.split("$(RUN)", 1)[1])
    return words[1:] if words[0] == "exec" else words


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def demo_dags_paused(set_to: bool | None = None) -> dict[str, bool]:
    """Each stored demo DAG's ``is_paused``, after setting it to ``set_to`` if given."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        stored = session.scalars(select(DagModel).where(DagModel.dag_id.in_(DEMO_DAG_IDS))).all()
        for dag in stored:
            dag.is_paused = dag.is_paused if set_to is None else set_to
        return {dag.dag_id: dag.is_paused for dag in stored}


def test_make_airflow_unpauses_the_demo_dags_once_they_are_stored(tmp_path: Path) -> None:
    shipped = {k: v for k, v in os.environ.items() if k != "RETENTION_POLICIES"}
    stored = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "dags", "reserialize"],
        env=shipped,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert stored.returncode == 0, stored.stderr[-3000:]
    assert demo_dags_paused(True) == dict.fromkeys(DEMO_DAG_IDS, True)

    recipe = airflow_recipe()
    assert recipe[0] == "python", recipe
    command = [sys.executable, *recipe[1 : recipe.index("--") + 1], *STAND_IN]
    env = {
        **shipped,
        "RETENTION_SANDBOX_PORT": str(free_port()),
        "RETENTION_EVENTS_PORT": str(free_port()),
    }
    log = tmp_path / "dev_services.log"
    with log.open("wb") as out:
        services = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 90
        while "dev_services: unpaused" not in log.read_text():
            assert services.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no unpause within 90 s:\n{log.read_text()}"
            time.sleep(0.5)
        assert demo_dags_paused() == dict.fromkeys(DEMO_DAG_IDS, False)
        said = log.read_text()
        assert "unpaused retention__event_logs, retention__media_assets, retention__replay" in said
        assert "Airflow creates new DAGs paused" in said

        services.send_signal(signal.SIGTERM)
        assert services.wait(60) == 128 + signal.SIGTERM
    finally:
        if services.poll() is None:
            services.kill()
            services.wait(10)
        demo_dags_paused(True)
