"""Background loops: one periodic task and one backoff, for every loop of the package.

:class:`Periodic` runs a step every ``interval()`` seconds, or at once when woken;
a step that raises is logged and the loop goes on (a watchdog must survive what
it meets); cancelling it ends it at once, whatever the step awaits. It never
waits with ``asyncio.wait_for``: before Python 3.12 that can swallow a
cancellation arriving as the wake-up does, and the loop would outlive its stop.

:class:`Backoff` is the delay between tries of something that keeps failing:
doubled with each failure in a row, up to a cap, forgotten on success.

Stdlib only, and nothing of the package: every layer may use it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["Backoff", "Periodic"]


class Backoff:
    """``first``, ``2 * first``, ``4 * first`` … at most ``cap`` seconds between tries."""

    def __init__(self, first: float, cap: float) -> None:
        self.first = first
        self.cap = cap
        #: Failures in a row since the last success.
        self.failures = 0

    @property
    def delay(self) -> float:
        """The wait after the last failure; 0.0 while nothing failed."""
        if not self.failures:
            return 0.0
        return float(min(self.first * 2 ** (self.failures - 1), self.cap))

    def failed(self) -> float:
        """Count a failure; the seconds to wait before the next try."""
        self.failures += 1
        return self.delay

    def reset(self) -> None:
        """A success: the next failure waits ``first`` again."""
        self.failures = 0


class Periodic:
    """Runs ``step`` every ``interval()`` seconds, or at once when woken, until stopped.

    ``minimum``: the shortest interval, whatever ``interval()`` says.
    ``gap``: seconds from a step's start before the next may start, however often it is
    woken meanwhile (wake-ups in a burst are served by one step after the gap).
    ``wait_first``: wait an interval (or a wake-up) before the first step.
    ``event``: the event that wakes it (shared with whoever sets it); its own if none.
    ``log``: returns the log a failed step goes to, as ``bai-jupyter: {what} failed``.
    Run it as a task of one's own (:meth:`run`), or with :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        step: Callable[[], Awaitable[object]],
        interval: Callable[[], float],
        what: str,
        log: Callable[[], logging.Logger | logging.LoggerAdapter[Any]],
        *,
        minimum: float = 0.0,
        wait_first: bool = False,
        event: asyncio.Event | None = None,
        gap: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.step = step
        self.gap = gap
        self.interval = interval
        self.what = what
        self.log = log
        self.minimum = minimum
        self.wait_first = wait_first
        self.event = event if event is not None else asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """Run the step now (or as soon as the one under way is done)."""
        self.event.set()

    async def run(self) -> None:
        """The loop itself: ends only when cancelled."""
        if self.wait_first:
            await self.wait()
        while True:
            started = time.monotonic()
            try:
                await self.step()
            except Exception:  # the loop must survive anything a step hits
                self.log().exception("bai-jupyter: %s failed", self.what)
            rest = self.gap() - (time.monotonic() - started)
            if rest > 0:
                await asyncio.sleep(rest)
            await self.wait()

    async def wait(self) -> None:
        """Wait for a wake-up or ``interval()`` seconds, then clear the wake-up."""
        waiter = asyncio.ensure_future(self.event.wait())
        try:
            await asyncio.wait({waiter}, timeout=max(self.interval(), self.minimum))
        finally:
            waiter.cancel()
        self.event.clear()

    def start(self) -> asyncio.Task[None]:
        """Run the loop in a task of its own (stopped by :meth:`stop`)."""
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self.run())
        return self.task

    async def stop(self) -> None:
        """Cancel the loop and wait until it has ended."""
        task, self.task = self.task, None
        if task is None:
            return
        task.cancel()
        # Not ``await task``: its CancelledError and one sent to us would look the same.
        await asyncio.wait({task})
        if not task.cancelled():
            task.result()  # it ended on its own: say why
