"""`make airflow` starts the sandbox API and the event receiver the demo policies name,
runs Airflow, and stops both when Airflow exits."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support.env import ROOT

SCRIPT = ROOT / "scripts" / "dev_services.py"

# Run by the script in place of `airflow standalone`: both services answer, then exit 3.
PROBE = """
import sys, urllib.request, urllib.error
sandbox, events = sys.argv[1], sys.argv[2]
stats = urllib.request.urlopen(f"http://127.0.0.1:{sandbox}/_sandbox/stats", timeout=10)
assert stats.status == 200, stats.status
try:
    urllib.request.urlopen(
        urllib.request.Request(f"http://127.0.0.1:{events}/hooks/retention", data=b"{}"),
        timeout=10,
    )
    raise SystemExit("the receiver accepted an unsigned event")
except urllib.error.HTTPError as refused:
    assert refused.code == 401, refused.code
sys.exit(3)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_the_services_run_while_the_command_runs_and_stop_with_it() -> None:
    sandbox, events = free_port(), free_port()
    env = {
        **os.environ,
        "RETENTION_SANDBOX_PORT": str(sandbox),
        "RETENTION_EVENTS_PORT": str(events),
        "AIRFLOW_CONN_MEDIA_EVENTS": json.dumps(
            {
                "conn_type": "http",
                "host": "127.0.0.1",
                "password": "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=",
            }
        ),
    }
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--", sys.executable, "-c", PROBE, str(sandbox), str(events)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 3, run.stdout + run.stderr
    assert f"sandbox deletion API on 127.0.0.1:{sandbox}" in run.stdout
    assert (
        "dev_services: stopped; event receiver: 0 retention.deleted events verified" in run.stdout
    )
    assert "1 bad signatures" in run.stdout
    assert refused(sandbox)
    assert refused(events)


def test_a_busy_port_is_named() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "RETENTION_SANDBOX_PORT": str(port)}
        run = subprocess.run(
            [sys.executable, str(SCRIPT), "--", sys.executable, "-c", "pass"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert run.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in run.stderr
    assert "RETENTION_SANDBOX_PORT" in run.stderr


# Run in place of `airflow standalone`: two grandchildren that ignore SIGINT and SIGTERM,
# one of them in a process group of its own (as Airflow's task processes are).
STUBBORN_TREE = """
import os, subprocess, sys, time
ignoring = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"
)
same = subprocess.Popen([sys.executable, "-c", ignoring])
own = subprocess.Popen([sys.executable, "-c", ignoring], process_group=0)
print("tree:", same.pid, own.pid, os.getpid(), flush=True)
time.sleep(120)
"""


def gone(pid: int) -> bool:
    """Ended: no such process, or a zombie nobody has reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_ctrl_c_stops_the_whole_tree_and_kills_what_ignores_it(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "RETENTION_SANDBOX_PORT": str(free_port()),
        "RETENTION_EVENTS_PORT": str(free_port()),
        "RETENTION_STOP_GRACE_SECONDS": "2",
    }
    log = tmp_path / "dev_services.log"
    with log.open("wb") as out:
        services = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--", sys.executable, "-c", STUBBORN_TREE],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    tree: list[int] = []  # the two grandchildren, then the command
    try:
        deadline = time.monotonic() + 60
        while log.read_text().count("ready") < 2:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        tree = [int(pid) for pid in log.read_text().split("tree:")[1].split()[:3]]

        services.send_signal(signal.SIGINT)
        assert services.wait(30) == 128 + signal.SIGINT
        said = log.read_text()
        assert "2 processes of" in said, said
        assert "did not stop after SIGINT; killed them" in said
        assert "dev_services: stopped" in said
        assert all(gone(pid) for pid in tree), tree
    finally:
        if services.poll() is None:
            services.kill()
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# A command that starts a task-like process in a session (and group) of its own, waits
# until it runs, and then ends by itself, as a crashed `airflow standalone` would.
LEAVES_A_TASK = """
import subprocess, sys, time
task = subprocess.Popen(
    [sys.executable, "-c", "import time; print('task', flush=True); time.sleep(600)"],
    start_new_session=True, stdout=subprocess.PIPE,
)
task.stdout.readline()
open(sys.argv[1], "w").write(str(task.pid))
time.sleep(1.5)  # the runner looks the leader's descendants up every second
"""


def test_a_command_that_ends_by_itself_leaves_no_task_behind(tmp_path: Path) -> None:
    """Its task process left the group, and the leader is gone when the stop begins: the
    descendants tracked while it ran are stopped all the same."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from process_group import run_in_group
    finally:
        sys.path.remove(str(SCRIPT.parent))
    written = tmp_path / "task.pid"
    task = 0
    try:
        code = run_in_group([sys.executable, "-c", LEAVES_A_TASK, str(written)], grace=5)
        assert code == 0
        task = int(written.read_text())
        deadline = time.monotonic() + 10
        while task and not gone(task) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert task
        assert gone(task), f"task {task} still runs"
    finally:
        if task:
            with contextlib.suppress(ProcessLookupError):
                os.kill(task, signal.SIGKILL)
