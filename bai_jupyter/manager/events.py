"""Session events from the store's change log, fanned out to this process's subscribers.

Every change of a session is logged with it, in its transaction (``store.events``),
whichever process made it: a Jupyter server, a manager service replica, a console
kernel's embedded manager. One follower per process reads the log in ``seq`` order
(woken at once by this process's own writes, else every ``interval``) and gives each
event, with its ``seq``, to every subscriber; none blocks it (a slow reader loses
its oldest). A subscriber that names the last ``seq`` it saw gets what it missed
from the log first, or a ``reset`` event where the log no longer holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Protocol

from ..broadcast import put_dropping_oldest

__all__ = ["EventHub", "EventLog"]

#: Events a slow subscriber may have waiting before it loses the oldest.
_QUEUE_SIZE = 1000
#: Events read from the log at once.
_BATCH = 500


class EventLog(Protocol):
    """The store's change log, as the hub reads it (in a thread: ``Core.query``)."""

    def after(self, seq: int, limit: int) -> Awaitable[list[tuple[int, dict[str, Any]]]]: ...

    def bounds(self) -> Awaitable[tuple[int, int]]: ...

    def prune(self, before: float) -> Awaitable[int]: ...


def reset_event(seq: int) -> dict[str, Any]:
    """Said to a reader resuming after ``seq`` the log no longer holds (or never held):
    what it missed is lost to it; read the sessions again."""
    return {"type": "reset", "seq": seq, "at": time.time()}


class EventHub:
    """Subscribers' queues, fed by one follower of the store's change log."""

    def __init__(self) -> None:
        self._subscribers: set[asyncio.Queue[dict[str, Any]]] = set()
        #: Those of them that also get usage events.
        self._usage: set[asyncio.Queue[dict[str, Any]]] = set()
        self._poke = asyncio.Event()
        self._log: EventLog | None = None
        self._closing = False
        #: The ``seq`` of the last event given to subscribers.
        self.seq = 0

    def poke(self) -> None:
        """Read the log now (this process just wrote to it)."""
        self._poke.set()

    async def open(self, log: EventLog) -> None:
        """Follow ``log`` from its newest event on (those before are history)."""
        self._log = log
        self._closing = False
        self.seq = (await log.bounds())[1]

    def close(self) -> None:
        """Make :meth:`follow` return after its current read (a read cut off in its thread
        would hold a connection of a store about to close)."""
        self._closing = True
        self._poke.set()

    async def follow(
        self,
        interval: Callable[[], float],
        retention: Callable[[], float],
        log: Callable[[], logging.Logger | logging.LoggerAdapter[Any]],
    ) -> None:
        """Give every logged event to the subscribers, until :meth:`close`; events older
        than ``retention()`` seconds are pruned now and then. A failed read is logged and
        tried again (the store may be restarting): nothing is skipped."""
        assert self._log is not None, "open() first"
        pruned = 0.0
        failing = False
        while not self._closing:
            self._poke.clear()
            try:
                rows = await self._log.after(self.seq, _BATCH)
                if time.monotonic() - pruned > min(60.0, retention() / 4):
                    pruned = time.monotonic()
                    await self._log.prune(time.time() - retention())
            except Exception as exc:
                if not failing:
                    log().warning("bai-jupyter: cannot read the session events (%s)", exc)
                failing, rows = True, []
            else:
                if failing:
                    log().info("bai-jupyter: reading the session events again")
                failing = False
            for seq, event in rows:
                self._deliver(seq, event)
            if len(rows) < _BATCH:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._poke.wait(), interval())

    def _deliver(self, seq: int, event: dict[str, Any]) -> None:
        event = {**event, "seq": seq}
        self.seq = seq
        for queue in list(self._subscribers):
            put_dropping_oldest(queue, event)

    @property
    def usage_followers(self) -> int:
        """Subscribers that asked for usage events (the usage watch reads while any do)."""
        return len(self._usage)

    def tell(self, event: dict[str, Any]) -> None:
        """Give an event that is not logged (``usage``: no ``seq``, never replayed) to the
        subscribers that asked for usage."""
        for queue in list(self._usage):
            put_dropping_oldest(queue, event)

    @contextlib.contextmanager
    def subscription(self, usage: bool = False) -> Iterator[asyncio.Queue[dict[str, Any]]]:
        """A queue that gets every event delivered while the ``with`` block runs
        (``usage``: and every usage event told meanwhile)."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=_QUEUE_SIZE)
        self._subscribers.add(queue)
        if usage:
            self._usage.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)
            self._usage.discard(queue)

    async def events(
        self, since: int | None = None, usage: bool = False
    ) -> AsyncIterator[dict[str, Any]]:
        """Events as they happen (until the caller stops iterating); ``since``: first every
        logged event after that ``seq``, or a ``reset`` event when the log lacks some;
        ``usage``: usage events too."""
        with self.subscription(usage) as queue:
            last = 0
            if since is not None and self._log is not None:
                first, newest = await self._log.bounds()
                if not first <= since <= max(newest, self.seq):
                    yield reset_event(newest)
                    last = newest
                else:
                    last = since
                    while True:
                        rows = await self._log.after(last, _BATCH)
                        for seq, event in rows:
                            yield {**event, "seq": seq}
                            last = seq
                        if len(rows) < _BATCH:
                            break
            while True:
                event = await queue.get()
                if event.get("seq", last + 1) > last:  # not already replayed (or not logged)
                    yield event
