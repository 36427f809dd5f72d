"""When each running session was last used, as this manager sees it.

Activity comes from what acts on a session: the front ends' calls (``touch``:
the execute API, the service-port proxy, an explicit activity call), the
manager's own operations (exec, signals), open SFTP connections (the idle watch
probes them), and main1's Jupyter kernel: the manager subscribes to its iopub
channel, so code run from any client (a notebook, a console, the execute API)
counts, and a kernel that is busy is in use for as long as it stays busy. Each
process writes what it saw to the store now and then (``store.notes``), where the
leader's idle watch reads it with its own; the idle watch writes its verdict to the
session (``status_data["idle"]``) so that a restarted manager knows it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Mapping
from typing import Any

import zmq
import zmq.asyncio

from ...model import Session
from ..core import Core

__all__ = ["Activity", "kernel_message"]

_DELIMITER = b"<IDS|MSG>"


def kernel_message(frames: list[bytes]) -> tuple[str, str | None]:
    """A Jupyter iopub message's type and, for a status message, its ``execution_state``;
    ``("", None)`` for frames that are not a message."""
    try:
        at = frames.index(_DELIMITER)
        msg_type = json.loads(frames[at + 2]).get("msg_type")
        state = json.loads(frames[at + 5]).get("execution_state") if msg_type == "status" else None
    except (ValueError, IndexError, AttributeError):
        return "", None
    return (
        msg_type if isinstance(msg_type, str) else "",
        state if isinstance(state, str) else None,
    )


#: iopub messages that say nothing about use: the kernel starting, a subscriber's welcome.
_NOT_USE = {"", "iopub_welcome"}


class Activity:
    """Last activity per session (epoch seconds and its source), and main1's kernel busy."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self._last: dict[str, tuple[float, str]] = {}
        #: Uses seen here and not yet written to the store.
        self._unsaved: dict[str, tuple[float, str]] = {}
        self._busy: set[str] = set()
        #: Each followed session's follower, and when it started (epoch seconds).
        self._followers: dict[str, tuple[asyncio.Task[None], float]] = {}
        self._context: zmq.asyncio.Context | None = None

    def touch(self, session_id: str, source: str, at: float | None = None) -> None:
        """Note that ``source`` used the session now (or ``at``)."""
        when = time.time() if at is None else at
        if when >= self._last.get(session_id, (0.0, ""))[0]:
            self._last[session_id] = (when, source)
            self._unsaved[session_id] = (when, source)

    def unsaved(self) -> dict[str, tuple[float, str]]:
        """The uses seen since the last call, to be written to the store."""
        taken, self._unsaved = self._unsaved, {}
        return taken

    def last(self, session_id: str) -> tuple[float, str] | None:
        """The last activity this manager saw; a busy kernel is in use right now."""
        if session_id in self._busy:
            return time.time(), "kernel"
        return self._last.get(session_id)

    # --- main1's kernel ---------------------------------------------------------------------

    def follow_kernel(self, session: Session, joined: asyncio.Event | None = None) -> None:
        """Follow main1's iopub channel (once per session) where the session has one;
        ``joined`` is set once connected to it (or at once when there is nothing to follow)."""
        main = session.main if session.kernels else None
        connection = (main.info.get("connection") if main else None) or {}
        if session.id in self._followers or not (
            connection.get("iopub_port") and connection.get("ip")
        ):
            if joined is not None:
                joined.set()
            return
        task = self.core.spawn(self._follow(session.id, connection, joined), loop=True)
        self._followers[session.id] = (task, time.time())

    async def follow_kernel_now(self, session: Session, timeout: float = 2.0) -> None:
        """Follow main1 and return once connected: whatever the kernel says after (a cell
        run at once, its 'busy') is seen. A follower that joins later misses what came
        before, and a kernel busy since then would look idle."""
        joined = asyncio.Event()
        self.follow_kernel(session, joined)
        try:
            await asyncio.wait_for(joined.wait(), timeout)
        except asyncio.TimeoutError:  # said, so that a session ended idle under a cell is explained
            self.core.log.warning(
                "bai-jupyter: session %s: its kernel's iopub not joined within %g s; "
                "what it says before then is not seen as use",
                session.id,
                timeout,
            )

    async def _follow(
        self, session_id: str, connection: Mapping[str, Any], joined: asyncio.Event | None
    ) -> None:
        if self._context is None:
            self._context = zmq.asyncio.Context()
        sock = self._context.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED) if joined else None
        try:
            sock.connect(f"tcp://{connection['ip']}:{int(connection['iopub_port'])}")
            if monitor is not None and joined is not None:
                await monitor.recv_multipart()  # connected: the subscription goes out now
                sock.disable_monitor()
                monitor.close(linger=0)
                monitor = None
                joined.set()
            while True:
                msg_type, state = kernel_message(await sock.recv_multipart())
                if state == "busy":
                    self._busy.add(session_id)
                elif state is not None:
                    self._busy.discard(session_id)
                if msg_type not in _NOT_USE and state != "starting":
                    self.touch(session_id, "kernel")
        finally:
            self._busy.discard(session_id)
            if monitor is not None:
                monitor.close(linger=0)
            sock.close(linger=0)

    # --- bookkeeping ------------------------------------------------------------------------

    def forget(self, session_id: str) -> None:
        """The session ended: stop following it and drop what was known."""
        self._last.pop(session_id, None)
        self._busy.discard(session_id)
        follower = self._followers.pop(session_id, None)
        if follower is not None:
            follower[0].cancel()

    def prune(self, keep: set[str], listed_at: float) -> None:
        """Forget every session but ``keep``, the ones not ended (starting, running or
        ending) in a list read at ``listed_at`` (epoch seconds). One followed or used since
        then stays too: it may have started after the list was read. A session's kernel is
        followed before it turns RUNNING, and a follower dropped then would miss the cell
        its user runs at once."""
        for session_id in (set(self._last) | set(self._followers)) - keep:
            followed = self._followers.get(session_id)
            used = self._last.get(session_id)
            if max(followed[1] if followed else 0.0, used[0] if used else 0.0) < listed_at:
                self.forget(session_id)

    def close(self) -> None:
        """Stop following kernels (the manager stops)."""
        for session_id in list(self._followers):
            self.forget(session_id)
        if self._context is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._context.term()
            self._context = None
