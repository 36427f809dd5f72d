"""An asyncio event loop in a daemon thread: async code for callers that cannot await it.

Two front ends need one: ``%bai`` magics are synchronous calls inside a kernel
whose own loop is busy running them, and a kernel provisioner outside a Jupyter
server (``jupyter console``, nbclient) embeds a manager whose scheduling loop
must keep running whatever its caller's loop does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """A private event loop in a daemon thread, started on first use."""

    def __init__(self, name: str = "bai-jupyter-loop") -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                # Its own worker threads: blocking calls made on it never wait behind
                # the caller's (a kernel's or a server's) default executor.
                loop.set_default_executor(ThreadPoolExecutor(thread_name_prefix=self.name))
                self._thread = threading.Thread(
                    target=loop.run_forever, name=self.name, daemon=True
                )
                self._thread.start()
                self._loop = loop
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop; the future can be waited on from any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` run on this loop, from another loop."""
        return await asyncio.wrap_future(self.submit(coro))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to its end from a synchronous caller; Ctrl-C cancels it and is raised."""
        future = self.submit(coro)
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            raise

    def iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        """The items of an async iterator, one by one, to the calling thread.

        Leaving early (Ctrl-C, ``break``) cancels the producer and waits until
        its clean-up (``finally`` blocks) has run.
        """
        inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        ended = threading.Event()
        tasks: list[asyncio.Task[None]] = []

        async def pump() -> None:
            try:
                async for item in items:
                    inbox.put(("item", item))
                inbox.put(("end", None))
            except Exception as exc:
                inbox.put(("error", exc))

        def start() -> None:  # on the loop; a task cancelled before its first step still ends
            task = asyncio.ensure_future(pump())
            task.add_done_callback(lambda _task: ended.set())
            tasks.append(task)

        loop = self.loop
        loop.call_soon_threadsafe(start)
        try:
            while True:
                kind, value = inbox.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:
            loop.call_soon_threadsafe(lambda: tasks[0].cancel())
            ended.wait()

    def stop(self, timeout: float) -> None:
        """Stop the loop and wait up to ``timeout`` for its thread; closed once it ended."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()
