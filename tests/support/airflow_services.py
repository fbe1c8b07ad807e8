"""Airflow's own processes for end-to-end tests: the api-server, the dag-processor, the scheduler.

Each runs as a separate process, as a deployment runs them, with this test
session's Airflow home and metadata database. Every wait has a deadline.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

AIRFLOW = str(Path(sys.executable).parent / "airflow")
STARTUP_SECONDS = 120


def wait_for(check: Callable[[], bool], seconds: float, what: str, step: float = 0.5) -> None:
    """Poll ``check`` until it holds, or fail naming ``what`` once ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {seconds:g} s")
        time.sleep(step)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@contextmanager
def airflow_process(
    name: str, args: list[str], env: dict[str, str], logs: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """One Airflow command in its own process group, stopped (then killed) on exit."""
    with (logs / f"{name}.log").open("wb") as log:
        process = subprocess.Popen(
            [AIRFLOW, *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield process
        finally:
            _stop(process)


@contextmanager
def api_server(env: dict[str, str], logs: Path, *, apps: str = "all") -> Iterator[str]:
    """An api-server on a free port; yields its base URL once it answers its health check.

    Airflow's CLI takes a port number, not a bound socket, so another process
    could take the port between choosing and binding it: a server that exits
    without answering is started again on a new port (at most 3 times).
    """
    for _ in range(3):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = ["api-server", "--port", str(port), "--apps", apps]
        server_env = {**env, "AIRFLOW__API__PORT": str(port)}
        with airflow_process("api-server", command, server_env, logs) as process:

            def answering(process: subprocess.Popen[bytes] = process, url: str = url) -> bool:
                if process.poll() is not None:
                    return True
                try:  # any answer will do: `--apps execution` has no health endpoint
                    return requests.get(f"{url}/api/v2/monitor/health", timeout=2).status_code < 500
                except requests.RequestException:
                    return False

            wait_for(answering, STARTUP_SECONDS, "the api-server answering")
            if process.poll() is None:
                yield url
                return
    raise RuntimeError(f"the api-server did not start; see {logs / 'api-server.log'}")


def service_environment(**extra: str) -> dict[str, str]:
    """This process's environment (the test home and metadata database) plus ``extra``."""
    return {**os.environ, **extra}


def tail(logs: Path, chars: int = 3000) -> str:
    """The end of every log in ``logs``, for assertion messages."""
    return "\n".join(f"--- {p.name}\n{p.read_text()[-chars:]}" for p in sorted(logs.glob("*.log")))
