"""The proxy's wire work with a service: one HTTP/1.1 exchange whose reply body is passed on
piece by piece, and the byte relay of an upgraded (WebSocket) connection.

Ours rather than tornado's HTTP client, which builds a request object, a
connection object, timers and a response for every request and hands a body
over through several layers; here a request is one write, and a piece of a body
goes from one socket's read to the other's write. An upgraded connection is
relayed as bytes: WebSocket frames cross untouched (no decoding, re-framing or
masking here; subprotocols, extensions, pings and the close handshake are the
two ends' business, as behind any reverse proxy).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

from tornado import httputil
from tornado.iostream import IOStream, StreamClosedError

__all__ = ["Sink", "pipe", "read_head", "relay_body", "request_head"]

#: Most bytes asked of a socket per read: a large body crosses in few pieces.
_CHUNK = 1 << 18
#: Buffer of each direction of an upgraded connection (messages are mostly small).
_PIPE_CHUNK = 1 << 16
_HEAD_END = rb"\r?\n\r?\n"
_MAX_HEAD = 1 << 16

#: Takes a piece of a body; what it returns (if not None) is awaited before the next read.
Sink = Callable[[memoryview], "Awaitable[None] | None"]


def request_head(method: str, target: str, headers: httputil.HTTPHeaders) -> bytes:
    """The request line and headers as sent (header values never hold a line break: they
    come from a parsed request or from us)."""
    lines = [f"{method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.get_all())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def read_head(
    stream: IOStream,
) -> tuple[httputil.ResponseStartLine, httputil.HTTPHeaders]:
    """The reply's status line and headers; informational replies (``1xx`` but ``101``) are
    skipped, the final one follows them."""
    while True:
        data = await stream.read_until_regex(_HEAD_END, max_bytes=_MAX_HEAD)
        line, _, rest = data.decode("latin-1").lstrip("\r\n").partition("\n")
        start = httputil.parse_response_start_line(line.rstrip("\r"))
        if start.code == 101 or not 100 <= start.code < 200:
            return start, httputil.HTTPHeaders.parse(rest)


async def relay_body(
    stream: IOStream,
    method: str,
    start: httputil.ResponseStartLine,
    headers: httputil.HTTPHeaders,
    sink: Sink,
) -> bool:
    """Pass the reply's body to ``sink`` as it arrives; whether the connection may carry
    another request (the body was framed, not ended by the service closing).

    The pieces are views of one buffer, read into straight from the socket (no copy
    here): ``sink`` must be done with one before it returns (or what it returns is done).
    """
    if method == "HEAD" or start.code in (204, 304) or start.code < 200:
        return True
    if "Transfer-Encoding" in headers:
        if headers["Transfer-Encoding"].lower() != "chunked":
            raise httputil.HTTPInputError(f"unknown framing {headers['Transfer-Encoding']!r}")
        await _chunked(stream, sink, _buffer(_CHUNK))
        return True
    if "Content-Length" in headers:
        value = headers["Content-Length"]
        if not (value.isascii() and value.isdigit()):
            raise httputil.HTTPInputError(f"a bad Content-Length {value[:32]!r}")
        length = int(value)
        await _fixed(stream, length, sink, _buffer(min(length, _CHUNK)))
        return True
    buf = _buffer(_CHUNK)
    try:  # the body ends where the connection does
        while True:
            await _put(sink, buf[: await _read(stream, buf)])
    except StreamClosedError:
        if stream.error is not None:
            raise
    return False


def _buffer(size: int) -> memoryview:
    return memoryview(bytearray(size))


def _read(stream: IOStream, into: memoryview) -> Awaitable[int]:
    """What is there (at least a byte), read into ``into``."""
    return stream.read_into(cast(bytearray, into), partial=True)  # any writable buffer


async def _put(sink: Sink, piece: memoryview) -> None:
    waiting = sink(piece)
    if waiting is not None:
        await waiting


async def _fixed(stream: IOStream, remaining: int, sink: Sink, buf: memoryview) -> None:
    while remaining > 0:
        count = await _read(stream, buf[: min(remaining, len(buf))])
        remaining -= count
        await _put(sink, buf[:count])


async def _chunked(stream: IOStream, sink: Sink, buf: memoryview) -> None:
    """Each chunk's data is passed on as it comes (the caller frames its own reply)."""
    while True:
        line = await stream.read_until(b"\n", max_bytes=_MAX_HEAD)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise httputil.HTTPInputError(f"a bad chunk size {line[:32]!r}") from None
        if size == 0:
            break
        await _fixed(stream, size, sink, buf)
        if await stream.read_bytes(2) != b"\r\n":
            raise httputil.HTTPInputError("a chunk without its CRLF")
    while (await stream.read_until(b"\n", max_bytes=_MAX_HEAD)).strip():
        pass  # trailers: not passed on


async def pipe(one: IOStream, other: IOStream, on_data: Callable[[], None]) -> None:
    """Relay bytes both ways until either side closes, then close both (an upgraded
    connection has no use for a half-closed one)."""

    async def copy(src: IOStream, dst: IOStream) -> None:
        buf = _buffer(_PIPE_CHUNK)
        try:
            while True:
                written = dst.write(buf[: await _read(src, buf)])
                on_data()
                if dst.writing():  # not all sent: the buffer is still in use
                    await written
        except StreamClosedError:
            pass
        finally:
            one.close()
            other.close()

    await asyncio.gather(copy(one, other), copy(other, one))
