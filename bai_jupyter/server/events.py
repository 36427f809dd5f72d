"""``/bai/api/v1/events``: session and kernel status changes as Server-Sent Events.

SSE rather than a WebSocket: it is one plain authorized GET, proxies and
browsers' ``EventSource`` handle it, and the stream only goes one way. Each frame's
``id`` is the event's ``seq`` in the store's change log: a client that reconnects
with ``Last-Event-ID`` (``EventSource`` does) or ``?since=`` gets what it missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web
from tornado.iostream import StreamClosedError

from ..broadcast import put_dropping_oldest
from ..errors import BaiError, InvalidRequest
from .base import BaiHandler

__all__ = ["EventsHandler", "UsageHandler", "end_stream"]


def end_stream(queue: asyncio.Queue[Any]) -> None:
    """Make the stream reading ``queue`` end (it may be full: drop the oldest then)."""
    put_dropping_oldest(queue, None)


class EventsHandler(BaiHandler):
    """Each event is ``event: session`` + ``data: {session_id, status, kernels, …}``."""

    _queue: asyncio.Queue[dict[str, Any] | None]

    def on_connection_close(self) -> None:
        queue = getattr(self, "_queue", None)
        if queue is not None:
            end_stream(queue)

    def _since(self) -> int | None:
        """Where the client resumes: ``?since=`` or the ``Last-Event-ID`` header."""
        since = self.get_query_argument("since", None) or self.request.headers.get("Last-Event-ID")
        if since is None or since == "":
            return None
        if not since.isdigit() or len(since) > 18:
            raise InvalidRequest(f"since: must be an event's seq (a whole number), got {since!r}")
        return int(since)

    def _usage(self) -> bool:
        """``?usage=1``: the caller's running sessions' usage events too."""
        value = self.get_query_argument("usage", "0").lower()
        if value not in {"0", "1", "true", "false", ""}:
            raise InvalidRequest(f"usage: must be 1 or 0, got {value!r}")
        return value in {"1", "true"}

    async def _pump(self, since: int | None, usage: bool = False) -> None:
        """Copy the caller's events to the queue; when they end, so does the stream.

        In remote mode they end when the manager service goes away (a restart): the
        client then reconnects, rather than wait on a stream nothing feeds any more."""
        try:
            async for event in self.api.events(since, usage):  # only what the caller may see
                put_dropping_oldest(self._queue, event)  # a slow reader loses the oldest
        except BaiError as exc:
            self.log.info("bai-jupyter: event stream ends: %s", exc)
        finally:
            end_stream(self._queue)

    @web.authenticated
    @authorized
    async def get(self) -> None:
        since, usage = self._since(), self._usage()
        self._queue = asyncio.Queue(maxsize=1000)
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        pump = asyncio.ensure_future(self._pump(since, usage))
        self.app.streams.add(self._queue)
        try:
            self.write(": connected\n\n")
            await self.flush()
            while True:
                try:
                    event = await asyncio.wait_for(self._queue.get(), self.app.keepalive_interval)
                except asyncio.TimeoutError:
                    self.write(": keep-alive\n\n")  # notices a client that went away
                    await self.flush()
                    continue
                if event is None:
                    break
                seq = f"id: {event['seq']}\n" if "seq" in event else ""
                self.write(f"{seq}event: {event['type']}\ndata: {json.dumps(event)}\n\n")
                await self.flush()
        except StreamClosedError:
            pass
        finally:
            self.app.streams.discard(self._queue)
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        with contextlib.suppress(StreamClosedError):
            self.finish()


class UsageHandler(BaiHandler):
    """A running session's usage now, per kernel: the ``usage`` event's body (the last
    one, when fresh; else read now, which takes a second)."""

    @web.authenticated
    @authorized
    async def get(self, key: str) -> None:
        self.write_json(await self.api.usage(key))
