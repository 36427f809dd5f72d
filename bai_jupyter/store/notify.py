"""On PostgreSQL, a logged event wakes every process on the store at once (NOTIFY).

Every transaction that logs events also sends ``NOTIFY bai_events``; PostgreSQL
delivers it to the listeners when (and only if) the transaction commits. A
listener is one thread per process with its own connection, waiting on the
channel; it only says "read the log now": the log itself is the truth, and
processes on SQLite (which has no such channel) read it every ``event_interval``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

__all__ = ["CHANNEL", "Listener", "notify"]

CHANNEL = "bai_events"
_log = logging.getLogger(__name__)


def notify(conn: Connection) -> None:
    """Wake the listeners once ``conn``'s transaction commits (PostgreSQL only)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text(f"NOTIFY {CHANNEL}"))


class Listener:
    """A thread that calls ``woken()`` on each notification of the store's channel, and
    once after each (re)connection (notifications sent while it was away are lost)."""

    def __init__(self, engine: Engine, woken: Callable[[], None], retry: float = 2.0) -> None:
        self._url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._woken = woken
        self._retry = retry
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bai-events-listener", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psycopg

        failing = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    failing = False
                    self._woken()
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self._woken()
            except Exception as exc:  # the store restarts: the log is read on a timer meanwhile
                if not failing:
                    _log.warning("bai-jupyter: not listening for the store's events (%s)", exc)
                failing = True
                self._stop.wait(self._retry)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
