"""RUNNING sessions by id in memory, so the proxy's per-request lookup skips the store.

Every status change of a session is published by the manager; the extension
drops a session from here on any event about it, and an entry also expires
after ``ttl`` seconds (an event a full subscriber queue lost cannot keep a
stale target for long).
"""

from __future__ import annotations

import time

from ..manager import BaiSessionManager
from ..model import Session, Status

__all__ = ["RunningSessions"]


class RunningSessions:
    """A cache of RUNNING sessions in front of :meth:`BaiSessionManager.get` (by id)."""

    def __init__(self, ttl: float = 5.0) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, Session]] = {}

    async def get(self, manager: BaiSessionManager, session_id: str) -> Session:
        """The session with that id (anyone's: the caller checks ownership); NotFound else."""
        entry = self._entries.get(session_id)
        now = time.monotonic()
        if entry is not None and now - entry[0] < self.ttl:
            return entry[1]
        session = await manager.get(session_id)
        if session.status is Status.RUNNING:
            self._entries[session_id] = (now, session)
        return session

    def forget(self, session_id: str) -> None:
        """The session changed: read it from the store next time."""
        self._entries.pop(session_id, None)
