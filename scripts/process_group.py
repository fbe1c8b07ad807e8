"""Run a command in a process group of its own, and stop every process it started.

``airflow standalone`` stops its components (scheduler, dag-processor,
api-server, triggerer) only on Ctrl-C; a SIGTERM ends it at once and leaves
them running, orphaned, with the api-server still on its port. So the command
runs as the leader of a new process group: a stop signal goes to the whole
group, and whatever is still alive after a bounded wait gets SIGKILL. Processes
that moved to a group of their own (Airflow's task processes do) are found as
descendants of the leader while it runs (looked up again every second), and
stopped the same way: psutil's process objects check a pid still names the
process they were made for, so a pid reused meanwhile is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable

import psutil

# How long the group may take to stop after the first signal before SIGKILL;
# Airflow's components need a few seconds (the scheduler ends its executor's workers).
STOP_GRACE_SECONDS = float(os.environ.get("RETENTION_STOP_GRACE_SECONDS", "20"))
# The signals that stop the command; a terminal that closes sends SIGHUP.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def alive(process: psutil.Process) -> bool:
    """Running, and not a zombie: a zombie has ended (only its exit status is left)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_members(pgid: int) -> list[psutil.Process]:
    """The live processes of process group ``pgid``."""
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(ProcessLookupError, PermissionError, psutil.Error):
            if os.getpgid(process.pid) == pgid and alive(process):
                members.append(process)
    return members


def descendants(root: psutil.Process) -> list[psutil.Process]:
    """``root``'s live descendants; none once ``root`` has ended (its pid may be reused)."""
    with contextlib.suppress(psutil.Error):
        return [p for p in root.children(recursive=True) if alive(p)]
    return []


def send(processes: Iterable[psutil.Process], signum: int) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signum)


def stop_group(
    leader: subprocess.Popen[bytes],
    signum: int,
    grace: float = STOP_GRACE_SECONDS,
    hurry: Callable[[], bool] = lambda: False,
    known: dict[int, psutil.Process] | None = None,
) -> int:
    """Send ``signum`` to the leader's group (and its descendants in other groups, with
    those ``known`` from while it ran), wait up to ``grace`` seconds (less if ``hurry()``
    turns true: a second Ctrl-C), then SIGKILL whatever is left. Returns how many
    processes had to be killed."""
    pgid = leader.pid
    tracked = dict(known or {})
    with contextlib.suppress(psutil.Error):
        tracked.update((p.pid, p) for p in descendants(psutil.Process(pgid)))
    tracked.update((p.pid, p) for p in group_members(pgid))
    if any(_pgid(p) == pgid for p in tracked.values()):  # an empty group's id may be reused
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)
    send((p for p in tracked.values() if _pgid(p) != pgid), signum)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not hurry():
        leader.poll()  # reap the leader, or it lingers as a zombie of ours
        tracked.update((p.pid, p) for p in group_members(pgid))
        if not any(alive(p) for p in tracked.values()):
            return 0
        time.sleep(0.2)
    tracked.update((p.pid, p) for p in group_members(pgid))
    survivors = [p for p in tracked.values() if alive(p)]
    send(survivors, signal.SIGKILL)
    psutil.wait_procs(survivors, timeout=5)
    return len(survivors)


def _pgid(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except (ProcessLookupError, PermissionError):
        return None


def run_in_group(command: list[str], grace: float = STOP_GRACE_SECONDS) -> int:
    """Run ``command`` as a process group's leader until it ends or a stop signal arrives.

    SIGINT (Ctrl-C; the command no longer shares the terminal's group, so it is
    passed on) and SIGTERM go to the whole group; SIGHUP goes on as SIGTERM. A
    second signal skips the rest of the wait. When the command ends by itself,
    anything it left behind in its group is stopped the same way. Returns the
    command's exit code, 128 + N if a signal N ended it.
    """
    received: list[int] = []
    previous = {
        s: signal.signal(s, lambda signum, _: received.append(signum)) for s in STOP_SIGNALS
    }
    try:
        leader = subprocess.Popen(command, process_group=0)
        root = psutil.Process(leader.pid)  # made while the pid is surely the leader's
        known: dict[int, psutil.Process] = {}
        looked = 0.0
        while leader.poll() is None and not received:
            if time.monotonic() - looked >= 1.0:  # task processes leave the group: track them
                known.update((p.pid, p) for p in descendants(root))
                looked = time.monotonic()
            with contextlib.suppress(subprocess.TimeoutExpired):
                leader.wait(0.2)
        first = received[0] if received else signal.SIGTERM
        killed = stop_group(
            leader,
            signal.SIGTERM if first == signal.SIGHUP else first,
            grace,
            hurry=lambda: len(received) > 1,
            known=known,
        )
        if killed:
            print(
                f"dev_services: {killed} processes of `{' '.join(command)}` did not stop "
                f"after {signal.Signals(first).name}; killed them",
                flush=True,
            )
        code = leader.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code
