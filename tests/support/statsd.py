"""A StatsD server on loopback for tests: a UDP socket that keeps every line it receives.

Metrics tests bind it, point a real StatsD client at it (Airflow's, in a subprocess or
in the test's process) and read back the ``retention.*`` lines that arrived, in order.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

PREFIX = "airflow"  # Airflow's default statsd_prefix, set explicitly by the tests
LINE = re.compile(r"^(?P<name>[^:]+):(?P<value>-?[0-9.eE+-]+)\|(?P<type>c|g|ms)(\|@[0-9.]+)?$")


@dataclass
class StatsdReceiver:
    """A UDP socket on loopback that keeps every StatsD line it receives, in order."""

    sock: socket.socket
    lines: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def listen(self) -> None:
        while not self.stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            with self.arrived:
                self.lines.extend(data.decode().splitlines())
                self.arrived.notify_all()

    def wait_for(self, name: str, timeout: float = 10.0) -> None:
        """Until a line of ``airflow.<name>`` has been read (sent before the run ended, it
        is already in the socket's buffer; this waits for the reader thread only)."""
        start = f"{PREFIX}.{name}:"
        with self.arrived:
            seen = self.arrived.wait_for(
                lambda: any(line.startswith(start) for line in self.lines), timeout
            )
        assert seen, f"no {name!r} line arrived; retention lines: {self.retention_names()}"

    def values(self, name: str, kind: str) -> list[float]:
        """Every value sent under ``airflow.<name>`` as type ``c``, ``g`` or ``ms``."""
        found = []
        for line in self.lines:
            match = LINE.match(line)
            assert match, f"not a StatsD line: {line!r}"
            if match["name"] == f"{PREFIX}.{name}" and match["type"] == kind:
                found.append(float(match["value"]))
        return found

    def last_gauge(self, name: str) -> float:
        values = self.values(name, "g")
        assert values, f"no gauge {name!r} arrived; retention lines: {self.retention_names()}"
        return values[-1]

    def retention_names(self) -> set[str]:
        names = (line.partition(":")[0] for line in self.lines)
        return {n for n in names if n.startswith(f"{PREFIX}.retention.")}


@contextmanager
def statsd_receiver() -> Iterator[StatsdReceiver]:
    """A receiver listening on a free loopback port until the block ends."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    receiver = StatsdReceiver(sock)
    thread = threading.Thread(target=receiver.listen, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.stop.set()
        thread.join(timeout=5)
        sock.close()


@contextmanager
def airflow_statsd_installed(*, influxdb_tags: bool = False) -> Iterator[StatsdReceiver]:
    """Airflow's StatsD logger (what its stats facade builds with ``statsd_on``; with
    ``influxdb_tags``, as with ``statsd_influxdb_enabled``: ``name,tag=value:1|c``, the only
    way plain StatsD carries tags), sending to a receiver on loopback and installed as
    retention's metrics sink until the block ends, when the sink before it is put back."""
    from airflow.sdk._shared.observability.metrics.statsd_logger import get_statsd_logger
    from statsd import StatsClient

    from retention import metrics

    tags = {"influxdb_tags_enabled": True, "statsd_influxdb_enabled": True}
    before = metrics.installed()
    with statsd_receiver() as receiver:
        logger = get_statsd_logger(
            stats_class=StatsClient,
            host="127.0.0.1",
            port=receiver.port,
            prefix=PREFIX,
            **(tags if influxdb_tags else {}),
        )
        metrics.install(logger)  # type: ignore[arg-type]
        try:
            yield receiver
        finally:
            metrics.install(before)
