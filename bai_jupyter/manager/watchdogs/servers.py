"""Jupyter servers that are gone: the sessions their kernels launched end with them.

A user's Jupyter server in remote mode (a JupyterHub's single-user server, or
any server with ``BaiJupyterApp.manager_url``) owns no manager: its kernels'
sessions live in the shared manager service. Every session such a kernel
launches names the server in its meta (``jupyter_server``: an id the server
draws when it starts), and the server tells the manager it is alive every few
seconds (``POST …/servers/{id}/heartbeat``). A server that stopped without
shutting its kernels down (SIGKILL, a crash, a Hub that stopped this manager
before its users' servers) says nothing more: once it has been silent for
``server_gone_timeout`` seconds, its kernels' sessions end (TERMINATED, or
CANCELLED while pending) with the reason ``server-gone``. A manager that starts
counts from its own start: a server that never comes back is gone after that
grace period. Sessions made through the API (no ``jupyter_server``) are never
ended here. Heartbeats are kept in memory, per (owner, server), so that one
user cannot keep another's server alive.
"""

from __future__ import annotations

import time
from typing import Protocol

from ...errors import BaiError
from ...model import NOT_ENDED, Session
from ..core import Core
from ..lifecycle.start_stop import Lifecycle

__all__ = ["SERVER_META", "ServerWatch"]

#: The key of a session's meta that names the Jupyter server whose kernel launched it.
SERVER_META = "jupyter_server"
#: The reason a session of a gone server ends with.
SERVER_GONE = "server-gone"


class ServerSettings(Protocol):
    @property
    def server_gone_timeout(self) -> float: ...


class ServerWatch:
    """Heartbeats of remote Jupyter servers, and the end of a silent server's sessions."""

    def __init__(self, core: Core, settings: ServerSettings, lifecycle: Lifecycle) -> None:
        self.core = core
        self.settings = settings
        self.lifecycle = lifecycle
        self._since = time.monotonic()
        self._seen: dict[tuple[str, str], float] = {}
        self._ending: set[str] = set()

    def every(self) -> float:
        """How often a server should say it is alive (a third of the grace period)."""
        return max(0.5, self.settings.server_gone_timeout / 3)

    def alive(self, owner: str, server: str) -> None:
        """``owner``'s server ``server`` is alive now."""
        self._seen[(owner, server)] = time.monotonic()

    async def loop(self) -> None:
        """Check every few seconds (off while ``server_gone_timeout`` is 0)."""
        self._since = time.monotonic()
        interval = lambda: min(5.0, self.every())  # noqa: E731
        what = "checking the Jupyter servers"
        await self.core.every(interval, self.check, what, minimum=0.2).run()

    async def check(self) -> None:
        """End the sessions of every server silent for longer than the grace period."""
        timeout = self.settings.server_gone_timeout
        if timeout <= 0:
            return
        now = time.monotonic()
        for session in await self.core.list_sessions(statuses=NOT_ENDED):
            server = session.meta.get(SERVER_META)
            if not isinstance(server, str) or not server:
                continue
            last = self._seen.get((session.owner, server), self._since)
            if now - last >= timeout and session.id not in self._ending:
                self._ending.add(session.id)
                self.core.spawn(self._end(session, server, now - last))
        # Forget servers silent for long: their sessions are ended already.
        self._seen = {k: t for k, t in self._seen.items() if now - t < max(timeout * 10, 600)}

    async def _end(self, session: Session, server: str, silent: float) -> None:
        self.core.log.warning(
            "bai-jupyter: %s's Jupyter server %s has been silent for %.0f s: gone; "
            "session %s its kernel launched ends (server-gone)",
            session.owner,
            server,
            silent,
            session.id,
        )
        try:
            await self.lifecycle.destroy(session.id, reason=SERVER_GONE)
        except BaiError as exc:  # ended or purged meanwhile
            self.core.log.debug("bai-jupyter: %s: %s", session.id, exc)
        finally:
            self._ending.discard(session.id)
