"""RUNNING sessions by id in memory, so the proxy's per-request lookup skips the store.

Every status change of a session is published by the manager; the extension
drops a session from here on any event about it, and an entry also expires
after ``ttl`` seconds (an event a full subscriber queue lost cannot keep a
stale target for long).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from ..model import Session, Status

__all__ = ["RunningSessions"]


class RunningSessions:
    """A cache of RUNNING sessions by id in front of a sessions API's ``get``."""

    def __init__(self, ttl: float = 5.0) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, Session]] = {}

    async def get(self, fetch: Callable[[str], Awaitable[Session]], key: str) -> Session:
        """The session ``key`` names: from the cache (by id: the caller checks ownership),
        else ``fetch(key)`` (a name resolves among the caller's own, and is not cached)."""
        entry = self._entries.get(key)
        now = time.monotonic()
        if entry is not None and now - entry[0] < self.ttl:
            return entry[1]
        session = await fetch(key)
        if session.status is Status.RUNNING and session.id == key:
            self._entries[key] = (now, session)
        return session

    def forget(self, session_id: str) -> None:
        """The session changed: read it from the store next time."""
        self._entries.pop(session_id, None)
