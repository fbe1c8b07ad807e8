"""Start the HTTP services the demo policies point at, run a command, stop them after it.

``make airflow`` runs ``python scripts/dev_services.py -- airflow standalone``:

- the sandbox deletion API that ``media_api`` names (``RETENTION_SANDBOX_PORT``,
  default 8765; 30 calls/s, as in ``make demo``);
- the event receiver that ``media_events`` names (``RETENTION_EVENTS_PORT``,
  default 8766), verifying signatures with the connection's ``whsec_`` password.

Both stop when the command exits. The command runs in a process group of its own
(``process_group.py``): Ctrl-C, SIGTERM or a closed terminal stops every process
in it, with SIGKILL for those still running after a bounded wait, so no
scheduler or api-server outlives ``make airflow``. ``--unpause-demo`` unpauses
the demo policies' DAGs once Airflow has parsed them (``demo_dags.py``). Without a
command they serve until Ctrl-C; ``--host 0.0.0.0`` makes them reachable from
containers (Astro's ``host.docker.internal``), which loopback is not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT)]

from process_group import run_in_group  # noqa: E402

from devtools.receiver import Receiver  # noqa: E402
from devtools.sandbox_api import SandboxServer  # noqa: E402
from retention.paths import load_local_env  # noqa: E402


def events_secret() -> str:
    """The receiver's secret: the password of the ``media_events`` connection."""
    raw = os.environ.get("AIRFLOW_CONN_MEDIA_EVENTS")
    if not raw:
        sys.exit("dev_services: AIRFLOW_CONN_MEDIA_EVENTS is not set; run `make env` first")
    password = json.loads(raw).get("password") if raw.lstrip().startswith("{") else None
    if not password:
        sys.exit("dev_services: AIRFLOW_CONN_MEDIA_EVENTS has no password (the whsec_ secret)")
    return str(password)


def start_services(host: str) -> tuple[SandboxServer, Receiver]:
    sandbox_port = int(os.environ.get("RETENTION_SANDBOX_PORT", "8765"))
    events_port = int(os.environ.get("RETENTION_EVENTS_PORT", "8766"))
    try:
        sandbox = SandboxServer(sandbox_port, host=host, rate=30, burst=30).start()
    except OSError as busy:
        sys.exit(
            f"dev_services: cannot listen on {host}:{sandbox_port} ({busy.strerror}); is a "
            "demo or another `make airflow` running? Set RETENTION_SANDBOX_PORT (and the "
            "media_api connection's port) to another port"
        )
    try:
        receiver = Receiver(events_secret(), host=host, port=events_port).start()
    except OSError as busy:
        sandbox.stop()
        sys.exit(
            f"dev_services: cannot listen on {host}:{events_port} ({busy.strerror}); set "
            "RETENTION_EVENTS_PORT (and the media_events connection's port) to another port"
        )
    print(
        f"dev_services: sandbox deletion API on {host}:{sandbox_port}, event receiver on "
        f"{host}:{events_port}",
        flush=True,
    )
    return sandbox, receiver


def unpause_demo_dags() -> subprocess.Popen[bytes]:
    """Unpause the demo's DAGs once parsed (``demo_dags.py``, beside the command); in a
    process group of its own, so Ctrl-C does not interrupt it mid-import."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "demo_dags.py")], process_group=0
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for containers)"
    )
    parser.add_argument(
        "--unpause-demo",
        action="store_true",
        help="unpause retention__event_logs and retention__media_assets once parsed",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- and the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    load_local_env()
    sandbox, receiver = start_services(args.host)
    unpausing = unpause_demo_dags() if command and args.unpause_demo else None
    try:
        if command:
            return run_in_group(command)
        print("dev_services: serving until Ctrl-C", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
        return 0
    finally:
        if unpausing and unpausing.poll() is None:
            unpausing.terminate()
            unpausing.wait(10)
        sandbox.stop()
        receiver.stop()
        print(f"dev_services: stopped; event receiver: {receiver.summary()}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
