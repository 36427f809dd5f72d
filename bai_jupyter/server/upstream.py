"""The proxy's HTTP client towards main1's services: one per server, not one per request.

jupyter-server-proxy makes a fresh client (and a fresh resolver) for every
request; kernels are reached at IP addresses, so ours answers those without
asking the system resolver (a thread hop per request under tornado).

tornado's simple client also opens (and closes) a TCP connection per request;
ours keeps the services' connections alive between requests: a new one costs a
connect, a close and, behind Docker's port proxy, a second connection there:
about a quarter of a small proxied request's time.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
from collections.abc import Callable
from types import TracebackType
from typing import Any

from tornado import httputil
from tornado.httpclient import HTTPRequest, HTTPResponse
from tornado.iostream import IOStream, StreamClosedError
from tornado.netutil import DefaultLoopResolver, Resolver
from tornado.simple_httpclient import (
    HTTPStreamClosedError,
    SimpleAsyncHTTPClient,
    _HTTPConnection,
)
from tornado.tcpclient import TCPClient

__all__ = ["KeepAliveClient", "LiteralFirstResolver", "upstream_client"]

#: Requests that may go on a kept connection: they can be sent again on a new one when the
#: service closed the kept one just as they went out. Others always get a new connection.
_IDEMPOTENT = {"GET", "HEAD", "OPTIONS", "PUT", "DELETE"}
#: Idle connections kept per service (more concurrent requests open more, then close them).
_IDLE_PER_SERVICE = 16
#: Seconds an idle connection is kept.
_IDLE_SECONDS = 15.0


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


class KeepAliveClient(SimpleAsyncHTTPClient):
    """tornado's simple client, with connections kept open between requests per service."""

    def initialize(self, *args: Any, **kwargs: Any) -> None:
        super().initialize(*args, **kwargs)
        #: Per service, its idle connections, each with the timer that closes it.
        self.idle: dict[tuple[str, int], list[tuple[IOStream, object]]] = {}

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
        super().close()

    def _handle_request(
        self,
        request: HTTPRequest,
        release_callback: Callable[[], None],
        final_callback: Callable[[HTTPResponse], None],
    ) -> None:
        _KeepAliveConnection(self, request, release_callback, final_callback, reuse=True)


class _Dial(TCPClient):
    """One request's way to its service: a kept connection where allowed, else a new one."""

    def __init__(self, client: KeepAliveClient, reuse: bool) -> None:
        super().__init__(resolver=client.resolver)
        self.client = client
        self.reuse = reuse
        self.reused = False

    async def connect(
        self,
        host: str,
        port: int,
        af: socket.AddressFamily = socket.AF_UNSPEC,
        ssl_options: dict[str, Any] | ssl.SSLContext | None = None,
        max_buffer_size: int | None = None,
        source_ip: str | None = None,
        source_port: int | None = None,
        timeout: float | datetime.timedelta | None = None,
    ) -> IOStream:
        self.host, self.port = host, port
        if self.reuse and ssl_options is None and source_ip is None:
            stream = self.client.take(host, port)
            if stream is not None:
                self.reused = True
                return stream
        return await super().connect(
            host, port, af, ssl_options, max_buffer_size, source_ip, source_port, timeout
        )


class _KeepAliveConnection(_HTTPConnection):
    """One request; its connection goes back to the client when the reply allows it."""

    def __init__(
        self,
        client: KeepAliveClient,
        request: HTTPRequest,
        release_callback: Callable[[], None],
        final_callback: Callable[[HTTPResponse], None],
        reuse: bool,
    ) -> None:
        self.keeper = client
        self.dial = _Dial(client, reuse and request.method in _IDEMPOTENT)
        self.reusable = False
        if "Connection" not in request.headers:  # tornado's client would say "close"
            request.headers["Connection"] = "keep-alive"
        super().__init__(
            client,
            request,
            release_callback,
            final_callback,
            client.max_buffer_size,
            self.dial,
            client.max_header_size,  # type: ignore[arg-type]  # None: tornado's defaults
            client.max_body_size,  # type: ignore[arg-type]
        )

    async def headers_received(
        self,
        first_line: httputil.ResponseStartLine | httputil.RequestStartLine,
        headers: httputil.HTTPHeaders,
    ) -> None:
        assert isinstance(first_line, httputil.ResponseStartLine)
        self.reusable = (
            first_line.version == "HTTP/1.1" and headers.get("Connection", "").lower() != "close"
        )
        await super().headers_received(first_line, headers)

    def _on_end_request(self) -> None:
        """Keep the connection: the reply was read to its end, and the service keeps it open.

        A body that ends with the connection has closed it by now.
        """
        if self.reusable and not self.stream.closed():
            self.keeper.keep(self.dial.host, self.dial.port, self.stream)
        else:
            self.stream.close()

    def _handle_exception(
        self,
        typ: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        """Send again on a new connection when a kept one was closed before any reply."""
        closed = (StreamClosedError, HTTPStreamClosedError, ConnectionError)
        if (
            self.dial.reused
            and self.code is None
            and self.final_callback is not None
            and isinstance(value, closed)
        ):
            release, final = self.release_callback, self.final_callback
            self.release_callback = self.final_callback = None  # type: ignore[assignment]
            self._remove_timeout()
            self.stream.close()
            _KeepAliveConnection(self.keeper, self.request, release, final, reuse=False)
            return True
        return super()._handle_exception(typ, value, tb)


def upstream_client() -> KeepAliveClient:
    """A client for many concurrent proxied requests (bodies stream: no size limit)."""
    return KeepAliveClient(
        force_instance=True,
        max_clients=1000,
        resolver=LiteralFirstResolver(),
        max_body_size=1 << 62,
    )
