"""An HTTP client of the REST API with the manager's method names (minus ``owner``).

Front ends that run outside the Jupyter server which owns the manager (a kernel
provisioner under JupyterHub, ``%bai`` in a remote kernel, scripts) use
:class:`RemoteManager` exactly as they would use
:class:`~bai_jupyter.manager.BaiSessionManager`; the server decides the owner from
the token. Errors come back as the same :mod:`bai_jupyter.errors` classes.
Everything is non-blocking (tornado's ``AsyncHTTPClient``).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import os
import signal as signals
import ssl
import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.httputil import HTTPInputError, parse_response_start_line
from tornado.iostream import IOStream, StreamClosedError
from tornado.tcpclient import TCPClient

from . import errors
from .model import Session, Status
from .request import Template
from .wire import session_from_json

__all__ = ["API_PREFIX", "RemoteManager"]

#: Where the REST API lives under a Jupyter server's base URL.
API_PREFIX = "bai/api/v1/"
_ERRORS: dict[str, type[errors.BaiError]] = {
    cls.code: cls
    for cls in (
        errors.InvalidRequest,
        errors.Forbidden,
        errors.NotFound,
        errors.Conflict,
        errors.Unavailable,
        errors.Timeout,
    )
}
_BY_STATUS: dict[int, type[errors.BaiError]] = {cls.status: cls for cls in _ERRORS.values()}
_BY_STATUS[401] = errors.Forbidden


class RemoteManager:
    """The session manager of a Jupyter server running the ``bai_jupyter`` extension."""

    def __init__(self, url: str, token: str = "", request_timeout: float = 60) -> None:
        """``url``: the server's base URL (``http://host:8888/`` or ``…/user/alice/``)."""
        self.url = url if url.endswith("/") else url + "/"
        self.token = token
        self.request_timeout = request_timeout

    @classmethod
    def from_env(cls) -> RemoteManager:
        """From ``BAI_JUPYTER_URL`` and ``BAI_JUPYTER_TOKEN`` (or ``JUPYTERHUB_API_TOKEN``)."""
        url = os.environ.get("BAI_JUPYTER_URL", "")
        if not url:
            raise errors.Unavailable(
                "no bai-jupyter server: set BAI_JUPYTER_URL to the URL of a Jupyter server "
                "running the bai_jupyter extension (and BAI_JUPYTER_TOKEN to its token)"
            )
        token = os.environ.get("BAI_JUPYTER_TOKEN") or os.environ.get("JUPYTERHUB_API_TOKEN", "")
        return cls(url, token)

    # --- transport ----------------------------------------------------------------------------

    def _endpoint(self, path: str, query: Mapping[str, Any] | None = None) -> str:
        params = {k: v for k, v in (query or {}).items() if v is not None}
        return self.url + API_PREFIX + path + (f"?{urlencode(params)}" if params else "")

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"token {self.token}"
        return headers

    def _unreachable(self, exc: BaseException) -> errors.Unavailable:
        return errors.Unavailable(
            f"cannot reach the bai-jupyter server at {self.url} ({exc or type(exc).__name__}): "
            "start it, or set BAI_JUPYTER_URL (and BAI_JUPYTER_TOKEN) to one that runs"
        )

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, Any] | None = None,
    ) -> Any:
        """One request; the decoded JSON reply (``None`` for 204), or the API's error raised."""
        headers = self._headers()
        data = None
        if body is not None or method in ("POST", "PUT"):
            headers["Content-Type"] = "application/json"
            data = json.dumps({} if body is None else body)
        request = HTTPRequest(
            self._endpoint(path, query),
            method=method,
            headers=headers,
            body=data,
            request_timeout=self.request_timeout,
            allow_nonstandard_methods=True,
        )
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as exc:
            if exc.response is None:  # our own timeout
                raise self._unreachable(exc) from exc
            raise _api_error(exc.response.code, exc.response.reason, exc.response.body) from None
        except OSError as exc:
            raise self._unreachable(exc) from exc
        if response.code == 204 or not response.body:
            return None
        return json.loads(response.body)

    # --- sessions -----------------------------------------------------------------------------

    async def create(
        self,
        request: Mapping[str, Any],
        template: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Session:
        """Enqueue a session (over ``template``); the PENDING session comes back."""
        body: dict[str, Any] = dict(request)
        if template is not None:
            body["template"] = template
        if meta is not None:
            body["meta"] = dict(meta)
        return session_from_json(await self._call("POST", "sessions", body))

    async def get(self, key: str, connection: bool = False) -> Session:
        """A session by id or name (``connection``: with its kernels' keys; owner only)."""
        query = {"connection": "true"} if connection else None
        return session_from_json(await self._call("GET", _path("sessions", key), query=query))

    async def get_json(self, key: str) -> dict[str, Any]:
        """A session as the API gives it, with its services' proxy URLs."""
        data: dict[str, Any] = await self._call("GET", _path("sessions", key))
        return data

    async def add_service_port(self, key: str, service_port: str) -> dict[str, Any]:
        """Declare ``name:proto:port`` on a running session's main1; the session as JSON."""
        body = {"service_port": service_port}
        data: dict[str, Any] = await self._call("POST", _path("sessions", key, "services"), body)
        return data

    async def list_sessions(
        self, statuses: Iterable[Status] | None = None, type: str | None = None
    ) -> list[Session]:
        """The caller's sessions, oldest first, optionally filtered by status and type."""
        query = {
            "status": None if statuses is None else ",".join(Status(s).value for s in statuses),
            "type": type,
        }
        reply = await self._call("GET", "sessions", query=query)
        return [session_from_json(item) for item in reply["sessions"]]

    async def destroy(self, key: str, reason: str = "user-requested") -> Session:
        """Cancel a pending session, or terminate a running one."""
        reply = await self._call("DELETE", _path("sessions", key), query={"reason": reason})
        return session_from_json(reply)

    async def wait_for(
        self, key: str, statuses: Iterable[Status], timeout: float | None = None
    ) -> Session:
        """Wait until the session is in one of ``statuses`` or has ended; Timeout otherwise.

        Events only say when to look again: once the stream ends or fails (server
        stopping, a proxy's idle timeout, refused) the session is polled every second.
        """
        wanted = {Status(s) for s in statuses}
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = _EventStream(self)
        polling = False
        try:
            while True:
                session = await self.get(key)
                if session.status in wanted or session.status.is_terminal:
                    return session
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise errors.Timeout(
                        f"session {session.id} is still {session.status.value} after {timeout:g} s"
                    )
                if polling:
                    await asyncio.sleep(min(left or 1.0, 1.0))
                    continue
                # Re-read on any event (cheap), and at least every 2 s.
                with contextlib.suppress(asyncio.TimeoutError):
                    try:
                        polling = (
                            await asyncio.wait_for(stream.next(), min(left or 2.0, 2.0)) is None
                        )
                    except errors.BaiError:
                        polling = True
        finally:
            await stream.close()

    async def logs(self, key: str, kernel: str = "main1") -> str:
        """A kernel's output (kept after the session ends)."""
        reply = await self._call("GET", _path("sessions", key, "logs"), query={"kernel": kernel})
        return str(reply["logs"])

    async def signal(self, key: str, signum: int, kernel: str = "main1") -> None:
        """SIGINT interrupts main1's ipykernel, SIGHUP restarts it in place."""
        actions = {signals.SIGINT: "interrupt", signals.SIGHUP: "restart"}
        action = actions.get(signals.Signals(signum))
        if action is None:
            raise errors.InvalidRequest(
                f"signal {signum}: only SIGINT (interrupt) and SIGHUP (restart) go over HTTP"
            )
        await self._call("POST", _path("sessions", key, action), query={"kernel": kernel})

    async def execute(
        self,
        key: str,
        code: str = "",
        mode: str = "query",
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """One step of the code execution API on main1 (see docs/api.md).

        Returns ``{run_id, status, exit_code, console}``; while ``status`` is
        ``continued`` call again with ``mode="continue"`` and the same ``run_id``,
        and with ``mode="input"`` (the text in ``code``) when it is ``waiting-input``.
        """
        body: dict[str, Any] = {"code": code, "mode": mode}
        if run_id is not None:
            body["run_id"] = run_id
        reply: dict[str, Any] = await self._call("POST", _path("sessions", key, "execute"), body)
        return reply

    async def events(self) -> AsyncGenerator[dict[str, Any], None]:
        """Status changes of the caller's sessions as they happen (Server-Sent Events).

        A cut stream, or a frame that is not JSON, raises Unavailable.
        """
        stream = _EventStream(self)
        try:
            while (event := await stream.next()) is not None:
                yield event
        finally:
            await stream.close()

    # --- templates, agents, scheduler ---------------------------------------------------------

    async def list_templates(self) -> builtins.list[Template]:
        """Shared templates and the caller's own."""
        reply = await self._call("GET", "templates")
        return [_template(item) for item in reply["templates"]]

    async def get_template(self, name: str) -> Template:
        """The caller's template of that name, else the shared one."""
        return _template(await self._call("GET", _path("templates", name)))

    async def put_template(
        self, name: str, spec: Mapping[str, Any], description: str = "", shared: bool = False
    ) -> Template:
        """Create or replace one of the caller's templates (``shared``: everyone's; admins)."""
        body = {"spec": dict(spec), "description": description, "shared": shared}
        return _template(await self._call("PUT", _path("templates", name), body))

    async def delete_template(self, name: str, shared: bool = False) -> None:
        """Remove the caller's template of that name (or the shared one)."""
        query = {"shared": "true"} if shared else None
        await self._call("DELETE", _path("templates", name), query=query)

    async def agents(self) -> builtins.list[dict[str, Any]]:
        """Each agent's capacity, occupied slots and kernels."""
        reply = await self._call("GET", "agents")
        found: builtins.list[dict[str, Any]] = reply["agents"]
        return found

    async def scheduler(self) -> dict[str, Any]:
        """The resource groups and the pending queue in order, each with why it waits."""
        reply: dict[str, Any] = await self._call("GET", "scheduler")
        return reply


def _template(data: dict[str, Any]) -> Template:
    return Template.from_json({k: v for k, v in data.items() if k != "shared"})


def _path(*parts: str) -> str:
    return "/".join(quote(part, safe="") for part in parts)


class _EventStream:
    """One open ``events`` request whose frames are parsed into a queue as they arrive.

    A plain HTTP/1.0 exchange on a stream of our own (the body is then raw until
    the server closes), so that :meth:`close` can really end it: tornado's
    HTTP client offers no way to abort a request it has under way.
    """

    def __init__(self, remote: RemoteManager) -> None:
        self._queue: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
        self._stream: IOStream | None = None
        self._closing = False
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

    async def _connect(self, remote: RemoteManager) -> IOStream:
        url = urlsplit(remote._endpoint("events"))
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
            **remote._headers(),
            "Host": url.netloc,
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
        }
        target = url.path + (f"?{url.query}" if url.query else "")
        lines = [f"GET {target} HTTP/1.0", *(f"{k}: {v}" for k, v in headers.items())]
        await stream.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        return stream

    async def _pump(self, remote: RemoteManager) -> None:
        try:
            self._stream = stream = await self._connect(remote)
            head = await stream.read_until(b"\r\n\r\n", max_bytes=65536)
            status_line, _, _ = head.decode("latin-1").partition("\r\n")
            start = parse_response_start_line(status_line)
            if start.code != 200:
                body = await stream.read_until_close()
                self._queue.put_nowait(_api_error(start.code, start.reason, body))
                return
            buffer = b""
            while True:
                buffer = self._feed(buffer + await stream.read_bytes(65536, partial=True))
        except StreamClosedError:
            self._queue.put_nowait(
                None
                if self._closing
                else remote._unreachable(ConnectionError("the event stream was cut"))
            )
        except (OSError, asyncio.TimeoutError, HTTPInputError) as exc:
            self._queue.put_nowait(remote._unreachable(exc))
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


def _api_error(status: int, reason: str, body: bytes | None) -> errors.BaiError:
    """The :mod:`bai_jupyter.errors` instance for an error reply of the API (or of Jupyter)."""
    code, message = "", ""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        data = json.loads(body or b"")
        code = str(data.get("error") or "")
        message = str(data.get("message") or data.get("reason") or "")
    cls = _ERRORS.get(code) or _BY_STATUS.get(status)
    if not message:
        message = f"HTTP {status} {reason}"
    if status in (401, 403):
        message += " (check BAI_JUPYTER_TOKEN)"
    if cls is None:
        error = errors.BaiError(message)
        error.status = status
        return error
    return cls(message)
