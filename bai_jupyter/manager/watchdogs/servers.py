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
ended here. Heartbeats are kept per (owner, server), so that one user cannot keep
another's server alive, and in the store (``store.notes``): whichever replica of a
manager service receives one, the leader, which runs this watch, reads it.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Protocol

from ...errors import BaiError
from ...model import NOT_ENDED, Session
from ...store import Transaction
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
        #: When this process started watching (it leads since): silence counts from then.
        self._since = time.time()
        #: Heartbeats received here and not yet written to the store.
        self._unsaved: dict[tuple[str, str], float] = {}
        self._ending: set[str] = set()
        self._pruned = 0.0

    def every(self) -> float:
        """How often a server should say it is alive (a third of the grace period)."""
        return max(0.5, self.settings.server_gone_timeout / 3)

    def alive(self, owner: str, server: str) -> None:
        """``owner``'s server ``server`` is alive now (written with the next notes)."""
        self._unsaved[(owner, server)] = time.time()

    def unsaved(self) -> dict[tuple[str, str], float]:
        """The heartbeats received since the last call, to be written to the store."""
        taken, self._unsaved = self._unsaved, {}
        return taken

    async def loop(self) -> None:
        """Check every few seconds (off while ``server_gone_timeout`` is 0)."""
        self._since = time.time()
        interval = lambda: min(5.0, self.every())  # noqa: E731
        what = "checking the Jupyter servers"
        await self.core.every(interval, self.check, what, minimum=0.2).run()

    async def check(self) -> None:
        """End the sessions of every server silent for longer than the grace period."""
        timeout = self.settings.server_gone_timeout
        if timeout <= 0:
            return
        now = time.time()
        keep = max(timeout * 10, 600)
        seen = await self.core.query(partial(Transaction.servers_seen, since=now - keep))
        for key, at in self._unsaved.items():  # received here, not written yet
            seen[key] = max(at, seen.get(key, 0.0))
        for session in await self.core.list_sessions(statuses=NOT_ENDED):
            server = session.meta.get(SERVER_META)
            if not isinstance(server, str) or not server:
                continue
            last = max(seen.get((session.owner, server), 0.0), self._since)
            if now - last >= timeout and session.id not in self._ending:
                self._ending.add(session.id)
                self.core.spawn(self._end(session, server, now - last))
        if now - self._pruned > 60:  # servers silent for long: their sessions ended already
            self._pruned = now
            forget = partial(Transaction.forget_servers, before=now - keep)
            await self.core.db(forget, serial=False)

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
