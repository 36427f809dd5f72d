"""What this server sees of a session's use, passed on to the manager's idle rules.

The execute API and the service-port proxy run in whichever process serves them
(a user's Jupyter server, or the manager service of a JupyterHub), so they tell
the manager through the sessions API (``touch``), never by reaching into its
store. A session is noted at most once per ``every`` seconds; a proxied
connection that stays open (a WebSocket, a stream, a long download) keeps its
session in use, noted again every ``every`` seconds until it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from ..api import SessionsAPI
from ..errors import BaiError

__all__ = ["ActivityNotes"]


class ActivityNotes:
    """Throttled activity calls per session, and the keep-alive of open proxied connections."""

    def __init__(self, every: float, log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        self.every = every
        self.log = log
        self._sent: dict[str, float] = {}
        self._open: dict[str, tuple[SessionsAPI, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._keepalive: asyncio.Task[None] | None = None

    def note(self, api: SessionsAPI, session_id: str, source: str) -> None:
        """Tell the manager (in the background) unless it was told less than ``every`` ago."""
        now = time.monotonic()
        if now - self._sent.get(session_id, -self.every) < self.every:
            return
        if len(self._sent) > 4096:  # forget sessions not noted for a while
            self._sent = {k: t for k, t in self._sent.items() if now - t < self.every}
        self._sent[session_id] = now
        task = asyncio.ensure_future(self._send(api, session_id, source))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, api: SessionsAPI, session_id: str, source: str) -> None:
        try:
            await api.touch(session_id, source)
        except BaiError as exc:  # it ended meanwhile, or the manager is away: nothing to keep
            self.log.debug("bai-jupyter: activity of %s not noted: %s", session_id, exc)

    def opened(self, api: SessionsAPI, session_id: str) -> None:
        """A proxied connection to the session opened: it is in use while it stays open."""
        _, count = self._open.get(session_id, (api, 0))
        self._open[session_id] = (api, count + 1)
        self.note(api, session_id, "proxy")
        if self._keepalive is None or self._keepalive.done():
            self._keepalive = asyncio.ensure_future(self._keep_open_ones())

    def closed(self, session_id: str) -> None:
        """One of the session's proxied connections closed."""
        api, count = self._open.get(session_id, (None, 0))
        if api is None:
            return
        if count > 1:
            self._open[session_id] = (api, count - 1)
        else:
            del self._open[session_id]
            self.note(api, session_id, "proxy")  # in use until just now

    async def _keep_open_ones(self) -> None:
        while self._open:
            await asyncio.sleep(self.every)
            for session_id, (api, _) in list(self._open.items()):
                self.note(api, session_id, "proxy")

    async def close(self) -> None:
        """The server stops: no more notes."""
        self._open.clear()
        tasks = [*self._tasks, *([self._keepalive] if self._keepalive else [])]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
