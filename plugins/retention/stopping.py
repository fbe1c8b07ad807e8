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
batch or call in flight finishes (a statement still running 3 s later is
cancelled and rolled back; an API call is bounded by its request timeout);
nothing new starts. The window then records itself
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

import psycopg
from psycopg.pq import TransactionStatus

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
        disarm()  # reached between batches: nothing left to cancel
        raise StopRequested(f"{what}: stopped on request (SIGTERM) before its next batch")


def stoppable_sleep(seconds: float) -> None:
    """``time.sleep`` that returns at once when a stop is requested (the package's waits)."""
    if seconds > 0:
        _requested.wait(seconds)


def request_stop() -> None:
    """Ask the work of this process to stop (what the signal handler does; tests call it)."""
    _requested.set()


CANCEL_AFTER_SECONDS = 3.0
"""After a stop request, a database statement still running is cancelled this much later:
Airflow kills the task 5 s after its SIGTERM, and a cancelled batch rolls back cleanly."""

_timers: list[threading.Timer] = []
_timers_lock = threading.Lock()


def disarm() -> None:
    """Forget the pending cancel: the work in flight has ended, and what follows (closing
    the window, recording the stop, releasing leases) must not be cancelled."""
    with _timers_lock:
        for timer in _timers:
            timer.cancel()
        _timers.clear()


@contextmanager
def graceful_stop(conn: psycopg.Connection[Any] | None = None) -> Iterator[None]:
    """Turn SIGTERM and SIGINT into a stop request while the block runs.

    With ``conn``, a statement still running on it ``CANCEL_AFTER_SECONDS`` after
    the request is cancelled, so a slow batch in flight cannot outlast Airflow's
    grace; the loops :func:`disarm` that as soon as they reach a stop check, so
    the writes that record the stop are never cancelled. The handlers Airflow
    installed stay in place: SIGTERM's (``on_kill``) is called after ours, and a
    second SIGINT interrupts as usual. They are restored on exit, and the request
    is forgotten then (``dag.test()`` runs the next task in the same process).
    Outside the main thread (where Python allows no signal handlers) the block
    runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        first = not _requested.is_set()
        _requested.set()
        if first:
            log.warning(
                "%s received: stopping after the batch or call in flight",
                signal.Signals(signum).name,
            )
            if conn is not None:
                timer = threading.Timer(CANCEL_AFTER_SECONDS, _cancel_running, (conn,))
                timer.daemon = True
                with _timers_lock:
                    _timers.append(timer)
                timer.start()
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, previous[signal.SIGINT])  # a second Ctrl-C interrupts
            return
        earlier: Any = previous.get(signal.Signals(signum))
        if callable(earlier):
            earlier(signum, frame)  # Airflow's own handler (on_kill)

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():  # first: no new timer after the disarm
            signal.signal(sig, handler)
        disarm()
        _requested.clear()


def _cancel_running(conn: psycopg.Connection[Any]) -> None:
    """Cancel the statement running on ``conn``, if one still is (never an idle session)."""
    if conn.closed or conn.info.transaction_status != TransactionStatus.ACTIVE:
        return
    try:
        conn.cancel_safe()
    except Exception:  # the session ended meanwhile: nothing left to cancel
        log.debug("stop: nothing to cancel", exc_info=True)
        return
    log.warning(
        "stop: cancelled the statement still running %.0f s after the request",
        CANCEL_AFTER_SECONDS,
    )
