"""Fan-out of session events: every status change reaches every subscriber, none blocks it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ..broadcast import put_dropping_oldest
from ..model import Session

__all__ = ["EventHub", "session_event"]

#: Events a slow subscriber may have waiting before it loses the oldest.
_QUEUE_SIZE = 1000


def session_event(session: Session, **extra: Any) -> dict[str, Any]:
    """The event that says a session changed (what the API's event stream carries)."""
    return {
        "type": "session",
        "session_id": session.id,
        "name": session.name,
        "owner": session.owner,
        "status": session.status.value,
        "status_info": session.status_info,
        "kernels": {k.hostname: k.status.value for k in session.kernels},
        "at": time.time(),
        **extra,
    }


class EventHub:
    """Subscribers' queues; publishing drops a slow reader's oldest event instead of waiting."""

    def __init__(self) -> None:
        self._subscribers: set[asyncio.Queue[dict[str, Any]]] = set()

    def publish(self, session: Session, **extra: Any) -> None:
        event = session_event(session, **extra)
        for queue in list(self._subscribers):
            put_dropping_oldest(queue, event)

    @contextlib.contextmanager
    def subscription(self) -> Iterator[asyncio.Queue[dict[str, Any]]]:
        """A queue that gets every event published while the ``with`` block runs."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=_QUEUE_SIZE)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Events as they happen (until the caller stops iterating)."""
        with self.subscription() as queue:
            while True:
                yield await queue.get()
