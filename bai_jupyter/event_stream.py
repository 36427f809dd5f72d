"""The REST API's event stream and error replies, as a RemoteManager reads them."""

from __future__ import annotations

__all__ = ["EventStream", "api_error"]

import asyncio
import contextlib
import json
import ssl
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from tornado.httputil import HTTPInputError, parse_response_start_line
from tornado.iostream import IOStream, StreamClosedError
from tornado.tcpclient import TCPClient

from . import errors

API_PREFIX = "bai/api/v1/"
_ERRORS: dict[str, type[errors.BaiError]] = {
    cls.code: cls
    for cls in (
        errors.InvalidRequest,
        errors.ConfigError,
        errors.Forbidden,
        errors.NotFound,
        errors.Conflict,
        errors.Unavailable,
        errors.Timeout,
    )
}
#: By status alone (a reply without our body): a 500 is no configuration error.
_BY_STATUS: dict[int, type[errors.BaiError]] = {
    cls.status: cls for cls in _ERRORS.values() if cls is not errors.ConfigError
}
_BY_STATUS[401] = errors.Forbidden


class Remote(Protocol):
    """What the stream needs of its client."""

    url: str
    request_timeout: float

    def api_url(self, path: str, query: Mapping[str, Any] | None = None) -> str: ...

    def headers(self) -> dict[str, str]: ...

    def unreachable(self, exc: BaseException) -> errors.Unavailable: ...


class EventStream:
    """One open ``events`` request whose frames are parsed into a queue as they arrive.

    A plain HTTP/1.0 exchange on a stream of our own (the body is then raw until
    the server closes), so that :meth:`close` can really end it: tornado's
    HTTP client offers no way to abort a request it has under way.
    """

    def __init__(self, remote: Remote, since: int | None = None, usage: bool = False) -> None:
        self._queue: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
        self._stream: IOStream | None = None
        self._closing = False
        self._since = since
        self._usage = usage
        self._task = asyncio.ensure_future(self._pump(remote))

    def _feed(self, buffer: bytes) -> bytes:
        """Queue every complete frame of ``buffer``; return the incomplete rest.

        A frame that is not JSON raises ValueError: the stream then fails with
        Unavailable rather than skip an event its consumer may be waiting for.
        """
        buffer = buffer.replace(b"\r\n", b"\n")
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            data = [line[5:].strip() for line in frame.split(b"\n") if line.startswith(b"data:")]
            if data:
                self._queue.put_nowait(json.loads(b"\n".join(data)))
        return buffer

    async def _connect(self, remote: Remote) -> IOStream:
        url = urlsplit(
            remote.api_url("events", {"since": self._since, "usage": "1" if self._usage else None})
        )
        secure = url.scheme == "https"
        port = url.port or (443 if secure else 80)
        stream = await asyncio.wait_for(
            TCPClient().connect(
                url.hostname or "localhost",
                port,
                ssl_options=ssl.create_default_context() if secure else None,
            ),
            remote.request_timeout,
        )
        headers = {
            **remote.headers(),
            "Host": url.netloc,
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
        }
        target = url.path + (f"?{url.query}" if url.query else "")
        lines = [f"GET {target} HTTP/1.0", *(f"{k}: {v}" for k, v in headers.items())]
        await stream.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        return stream

    async def _pump(self, remote: Remote) -> None:
        try:
            self._stream = stream = await self._connect(remote)
            head = await stream.read_until(b"\r\n\r\n", max_bytes=65536)
            status_line, _, _ = head.decode("latin-1").partition("\r\n")
            start = parse_response_start_line(status_line)
            if start.code != 200:
                body = await stream.read_until_close()
                self._queue.put_nowait(api_error(start.code, start.reason, body))
                return
            buffer = b""
            while True:
                buffer = self._feed(buffer + await stream.read_bytes(65536, partial=True))
        except StreamClosedError:
            self._queue.put_nowait(
                None
                if self._closing
                else remote.unreachable(ConnectionError("the event stream was cut"))
            )
        except (OSError, asyncio.TimeoutError, HTTPInputError) as exc:
            self._queue.put_nowait(remote.unreachable(exc))
        except ValueError as exc:  # a frame that is not JSON: end with an error, not silently
            self._queue.put_nowait(
                errors.Unavailable(f"the event stream of {remote.url} sent a bad frame: {exc}")
            )

    async def next(self) -> dict[str, Any] | None:
        """The next event; ``None`` once the stream has ended; its failure raised."""
        item = await self._queue.get()
        if item is None or isinstance(item, BaseException):
            self._queue.put_nowait(item)  # the end stays the end
            if item is not None:
                raise item
        return item

    async def close(self) -> None:
        self._closing = True
        if self._stream is not None:
            self._stream.close()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def api_error(status: int, reason: str, body: bytes | None) -> errors.BaiError:
    """The :mod:`bai_jupyter.errors` instance for an error reply of the API (or of Jupyter)."""
    code, message, field = "", "", None
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        data = json.loads(body or b"")
        code = str(data.get("error") or "")
        message = str(data.get("message") or data.get("reason") or "")
        field = str(data["field"]) if data.get("field") else None
    cls = _ERRORS.get(code) or _BY_STATUS.get(status)
    if not message:
        message = f"HTTP {status} {reason}"
    if status in (401, 403):
        message += " (check BAI_JUPYTER_TOKEN)"
    if cls is None:
        error = errors.BaiError(message, field)
        error.status = status
        return error
    return cls(message, field)
