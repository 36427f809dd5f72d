"""The proxy's connections to main1's services: one pool per server, kept between requests.

Kernels are reached at IP addresses, so the pool answers those without asking
the system resolver (a thread hop per request under tornado).

A new connection costs a connect, a close and, behind Docker's port proxy, a
second connection there: about a quarter of a small proxied request's time. So
the services' connections stay open between requests.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

from tornado import httputil, util
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream, StreamClosedError
from tornado.netutil import DefaultLoopResolver, Resolver
from tornado.tcpclient import TCPClient

from .relay import read_head

__all__ = [
    "IDEMPOTENT",
    "KeepAliveClient",
    "LiteralFirstResolver",
    "Unreachable",
]

#: Requests that may go on a kept connection: they can be sent again on a new one when the
#: service closed the kept one just as they went out. Others always get a new connection.
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
#: Idle connections kept per service (more concurrent requests open more, then close them).
_IDLE_PER_SERVICE = 16
#: Seconds an idle connection is kept.
_IDLE_SECONDS = 15.0
#: Bytes tornado reads at once for a reply's head (its default is 64 KiB, allocated and
#: cleared for every read): a body is read into the proxy's own buffer, not through this.
_READ_CHUNK = 1 << 14


class LiteralFirstResolver(Resolver):
    """IP literals resolve to themselves at once; names go to the default resolver."""

    def initialize(self) -> None:
        self._names = DefaultLoopResolver()

    async def resolve(
        self, host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[tuple[int, Any]]:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            found: list[tuple[int, Any]] = await self._names.resolve(host, port, family)
            return found
        if address.version == 6:
            return [(socket.AF_INET6, (host, port, 0, 0))]
        return [(socket.AF_INET, (host, port))]

    def close(self) -> None:
        self._names.close()


def _alive(stream: IOStream) -> bool:
    """Whether an idle connection is still open, and quiet (nothing unasked-for waiting)."""
    if stream.closed():
        return False
    try:
        stream.socket.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False  # the service closed it (b""), or sent bytes nobody asked for


class Unreachable(Exception):
    """No connection to the service (refused, unreachable, none in time)."""


class KeepAliveClient:
    """The services' connections, kept open between requests per service: the proxy sends
    its requests with :meth:`send` and gives connections back with :meth:`keep`. Made on
    the server's loop."""

    def __init__(self) -> None:
        self.io_loop = IOLoop.current()
        self.resolver = LiteralFirstResolver()
        self.dialer = TCPClient(resolver=self.resolver)
        #: Per service, its idle connections, each with the timer that closes it.
        self.idle: dict[tuple[str, int], list[tuple[IOStream, object]]] = {}

    async def send(
        self,
        host: str,
        port: int,
        request: bytes,
        reuse: bool,
        timeout: float | None,
        track: Callable[[IOStream], None],
    ) -> tuple[IOStream, httputil.ResponseStartLine, httputil.HTTPHeaders]:
        """Send ``request`` (head and body) to ``host:port``; the connection and the reply's
        head. A kept connection (where ``reuse`` allows) that the service closed just before
        is replaced by a new one and the request sent again. ``track`` gets each connection
        as it is used (to close it when the caller leaves).

        Raises :class:`Unreachable` (nothing went out), else StreamClosedError or
        HTTPInputError (no proper reply).
        """
        while True:
            stream = self.take(host, port) if reuse else None
            kept = stream is not None
            if stream is None:
                stream = await self._dial(host, port, timeout)
            track(stream)
            try:
                stream.write(request)  # a failure closes the stream: the read says so
                start, headers = await read_head(stream)
                return stream, start, headers
            except StreamClosedError:
                stream.close()
                if not kept:
                    raise
                reuse = False
            except httputil.HTTPInputError:
                stream.close()
                raise

    async def _dial(self, host: str, port: int, timeout: float | None) -> IOStream:
        try:
            stream = await self.dialer.connect(host, port, timeout=timeout)
        except (OSError, util.TimeoutError) as exc:  # refused, unreachable, none in time
            real = exc.real_error if isinstance(exc, StreamClosedError) else None
            raise Unreachable(str(real or exc) or "no connection in time") from None
        stream.set_nodelay(True)
        stream.read_chunk_size = _READ_CHUNK
        return stream

    def take(self, host: str, port: int) -> IOStream | None:
        """A kept connection to ``host:port`` that is still open, if there is one."""
        streams = self.idle.get((host, port), [])
        while streams:
            stream, timer = streams.pop()
            self.io_loop.remove_timeout(timer)
            if _alive(stream):
                return stream
            stream.close()
        return None

    def keep(self, host: str, port: int, stream: IOStream) -> None:
        streams = self.idle.setdefault((host, port), [])
        if len(streams) >= _IDLE_PER_SERVICE:
            stream.close()
            return
        timer = self.io_loop.call_later(_IDLE_SECONDS, self._expire, streams, stream)
        streams.append((stream, timer))

    def _expire(self, streams: list[tuple[IOStream, object]], stream: IOStream) -> None:
        """Close a connection idle for long (its session may be gone: no file kept open)."""
        streams[:] = [(s, timer) for s, timer in streams if s is not stream]
        stream.close()

    def close(self) -> None:
        for streams in self.idle.values():
            for stream, timer in streams:
                self.io_loop.remove_timeout(timer)
                stream.close()
        self.idle.clear()
        self.dialer.close()
