"""`make airflow` stopped with SIGTERM stops all of Airflow, not only the demo's services.

The real target runs (``make -o env airflow``: the recipe as written, with this
test's environment instead of ``.local/env``) with the real ``airflow
standalone`` on free ports and an empty DAGs folder, so nothing is scheduled.
Once its components run (and the api-server listens, or 20 s have passed), make
gets a SIGTERM; afterwards no process of its session may be left and every port
must be free. Whatever happens, the session is killed at the end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from tests.support.env import ROOT

BIN = str(Path(sys.executable).parent)
COMPONENTS = ("airflow standalone", "scheduler", "dag-processor", "api-server", "triggerer")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def session_processes(sid: int) -> list[psutil.Process]:
    """Live (not zombie) processes of session ``sid``: make and all it started, whatever
    process group they moved to."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == sid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def command_lines(processes: list[psutil.Process]) -> list[str]:
    """Each live process's whole command line: matching must not depend on how long
    the checkout's path is (a cut line hides "airflow standalone" under a deep one)."""
    lines = []
    for process in processes:
        try:
            lines.append(f"{process.pid} {' '.join(process.cmdline())}")
        except psutil.Error:
            continue
    return lines


def describe(processes: list[psutil.Process]) -> list[str]:
    """Command lines cut short, for a readable failure message only."""
    return [line[:120] for line in command_lines(processes)]


def wait_until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)
    return True


def test_sigterm_to_make_airflow_stops_every_airflow_process_and_frees_its_ports(
    tmp_path: Path,
) -> None:
    ports = {
        name: free_port()
        for name in ("api-server", "sandbox", "events", "worker logs", "triggerer logs")
    }
    (tmp_path / "dags").mkdir()
    env = {
        **os.environ,
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"),
        # Not the shipped policies: the recipe's --unpause-demo leaves the tests' DAGs alone.
        "RETENTION_POLICIES": str(tmp_path / "dags" / "no_policies.yaml"),
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(tmp_path / "logs"),
        "AIRFLOW__API__PORT": str(ports["api-server"]),
        "AIRFLOW__API__BASE_URL": f"http://localhost:{ports['api-server']}",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(ports["worker logs"]),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(ports["triggerer logs"]),
        "RETENTION_SANDBOX_PORT": str(ports["sandbox"]),
        "RETENTION_EVENTS_PORT": str(ports["events"]),
    }
    log = tmp_path / "make-airflow.log"
    with log.open("wb") as out:
        make = subprocess.Popen(
            ["make", "--no-print-directory", "-o", "env", "airflow", "RUN="],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        began = time.monotonic()

        def components_running() -> bool:
            running = " ".join(command_lines(session_processes(make.pid))).replace("_", "-")
            return all(component in running for component in COMPONENTS)

        assert wait_until(components_running, 30), (
            f"{describe(session_processes(make.pid))}\n{log.read_text()[-3000:]}"
        )
        # The api-server binds its port about 16 s after the start on an idle machine; on a
        # busy one it may still be importing at 20 s, and is stopped all the same.
        wait_until(lambda: listening(ports["api-server"]), 20 - (time.monotonic() - began))

        make.send_signal(signal.SIGTERM)
        make.wait(timeout=40)
        left = session_processes(make.pid)
        assert left == [], f"still running after make ended: {describe(left)}"
        busy = [name for name, port in ports.items() if listening(port)]
        assert busy == [], f"ports still open: {busy}"
        assert "dev_services: stopped" in log.read_text()
    finally:
        for process in session_processes(make.pid):
            try:
                process.kill()
            except psutil.Error:
                continue
        if make.poll() is None:
            make.kill()
            make.wait(10)
