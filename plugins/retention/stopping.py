"""Graceful stops: SIGTERM asks the running window or pass to stop between calls.

Airflow stops a task it no longer wants (a run marked failed, a task marked
failed or cleared, a worker shutting down) by sending SIGTERM to the task
process and SIGKILL about five seconds later. The task runner's own handler
only calls the operator's ``on_kill``, which does nothing for a ``@task``, so
without this module a window went on deleting until the SIGKILL, left its
ledger row ``running`` and its leases held.

:func:`graceful_stop` wraps the work of a task: a SIGTERM (or SIGINT) sets a
flag, every wait of the package (:func:`stoppable_sleep`) wakes at once, and
the loops check :func:`stop_requested` before each batch, claim and call. The
batch or call in flight finishes (each is bounded by ``statement_timeout`` or
the request timeout); nothing new starts. The window then records itself
``cancelled`` and the leases of operations it never called are released.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

_requested = threading.Event()
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequested(Exception):
    """The task was told to stop (SIGTERM); raised between batches or calls, never inside."""


def stop_requested() -> bool:
    """True once this process was told to stop."""
    return _requested.is_set()


def raise_if_stopping(what: str) -> None:
    """Raise :class:`StopRequested` naming ``what`` stopped, when a stop was asked for."""
    if _requested.is_set():
        raise StopRequested(f"{what}: stopped on request (SIGTERM) before its next batch")


def stoppable_sleep(seconds: float) -> None:
    """``time.sleep`` that returns at once when a stop is requested (the package's waits)."""
    if seconds > 0:
        _requested.wait(seconds)


def request_stop() -> None:
    """Ask the work of this process to stop (what the signal handler does; tests call it)."""
    _requested.set()


@contextmanager
def graceful_stop() -> Iterator[None]:
    """Turn SIGTERM and SIGINT into a stop request while the block runs.

    The handlers Airflow installed stay in place and are called after ours
    (``on_kill``), and are restored on exit. Outside the main thread (where
    Python allows no signal handlers) the block runs unchanged.
    """
    _requested.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not _requested.is_set():
            log.warning(
                "%s received: stopping after the batch or call in flight",
                signal.Signals(signum).name,
            )
        _requested.set()
        earlier: Any = previous.get(signal.Signals(signum))
        if callable(earlier) and signum == signal.SIGTERM:
            earlier(signum, frame)  # Airflow's own handler (on_kill); SIGINT's would raise

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _requested.clear()
