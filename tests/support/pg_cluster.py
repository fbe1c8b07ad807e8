"""A scratch PostgreSQL cluster of the test's own, which the test may restart or crash.

Uses the server binaries installed on the machine (Debian's postgresql package);
as root, every command runs as the ``postgres`` user, as the server refuses root.
"""

from __future__ import annotations

import getpass
import glob
import os
import shutil
import subprocess
from pathlib import Path

from devtools.airflow_services import free_port


def server_bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


class ScratchCluster:
    """initdb + pg_ctl on a directory of its own, on a free port, listening on 127.0.0.1."""

    def __init__(self, base: Path) -> None:
        bindir = server_bin_dir()
        if bindir is None:
            raise FileNotFoundError("no PostgreSQL server binaries (pg_ctl) on this machine")
        self.bin = bindir
        self.base = base
        self.data = base / "data"
        self.log = base / "server.log"
        self.port = free_port()
        self.as_root = os.geteuid() == 0
        self.running = False
        if self.as_root:
            shutil.chown(base, "postgres", "postgres")

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        # No pipes: the postmaster that pg_ctl starts would hold them open forever.
        subprocess.run(
            command,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )

    @property
    def user(self) -> str:
        return "postgres" if self.as_root else getpass.getuser()

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres"

    def _options(self) -> str:
        return f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off"

    def start(self) -> ScratchCluster:
        self._run("initdb", "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8")
        self._start(self._options())
        return self

    def _start(self, options: str) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        self.running = True

    def start_standby_of(self, primary: ScratchCluster) -> ScratchCluster:
        """A streaming standby of ``primary`` (pg_basebackup -R), reporting back every second."""
        self._run(
            "pg_basebackup",
            "-D",
            str(self.data),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            primary.user,
            "-R",
            "-X",
            "stream",
        )
        self._start(f"{self._options()} -c wal_receiver_status_interval=1")
        return self

    def restart(self, mode: str = "fast") -> None:
        """``fast`` is a clean restart; ``immediate`` is a crash (WAL replay on start)."""
        self._run(
            "pg_ctl", "-D", str(self.data), "-m", mode, "-o", self._options(), "-w", "restart"
        )

    def stop(self) -> None:
        """Stop at once (a test may stop a server before its fixture's teardown does)."""
        if self.running:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            self.running = False
