"""``/bai/sessions/{id or name}/proxy/{service}/…``: a service port of main1, HTTP and WebSocket.

Built on jupyter-server-proxy's :class:`ProxyHandler` (its request building,
WebSocket relay, subprotocols and redirect rewriting); what is ours: the target
comes from the session (never from the URL), the caller must own the session,
Jupyter's credentials stay here, and response bodies stream instead of being
buffered whole.
"""

from __future__ import annotations

import re
from http.client import responses
from http.cookies import CookieError, SimpleCookie
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode

from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.utils import HTTP_METHOD_TO_AUTH_ACTION
from jupyter_server.utils import ensure_async, url_path_join
from jupyter_server_proxy.handlers import ProxyHandler  # type: ignore[import-untyped]
from tornado import httpclient, httputil, web
from tornado.web import HTTPError

from ..errors import BaiError, Forbidden, InvalidRequest, NotFound, Unavailable
from ..registry import local_owner
from .base import ADMIN, SESSIONS, error_body
from .checks import require_running

__all__ = ["ServiceUnreachable", "SessionProxyHandler"]

#: Query parameters and headers that carry Jupyter's credentials.
_JUPYTER_QUERY = {"token", "_xsrf"}
_JUPYTER_HEADERS = ("X-XSRFToken", "X-XSRF-Token", "X-Csrftoken")
_JUPYTER_AUTH = re.compile(r"^\s*(token|bearer)\s", re.IGNORECASE)
#: Response headers a streamed reply must not copy (tornado frames the body itself; a
#: Content-Length is kept: the client then reads a plain body instead of chunks).
_FRAMING = {"Transfer-Encoding", "Connection", "Keep-Alive"}
#: tornado's client reads bodies in pieces of this size; a full one means more is waiting.
_READ_CHUNK = 65536
_FLUSH_AT = 1 << 19


class _ClientGone(httputil.HTTPInputError):
    """Raised in the streaming callback to abort the fetch and close its connection.

    An HTTPInputError because tornado logs any other callback error as a traceback.
    """


class ServiceUnreachable(HTTPError):
    """The service was not reached (refused, unreachable, no connection in time): the
    request never went out, so it may go to another replica."""

    def __init__(self, message: str) -> None:
        super().__init__(502, message)


class SessionProxyHandler(ProxyHandler):  # type: ignore[misc]
    """Proxies to the service's port on main1, once the caller is allowed."""

    auth_resource = SESSIONS
    #: Seconds to connect to the service.
    connect_timeout = 20.0

    def initialize(self, app: Any) -> None:
        self.bai = app
        self.target: tuple[str, int] | None = None
        self.client_gone = False

    def on_connection_close(self) -> None:
        """The caller left: stop the upstream fetch at its next chunk (streams, downloads)."""
        self.client_gone = True
        super().on_connection_close()

    # --- who may go where ---------------------------------------------------------------------

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        """Authenticate (jupyter-server-proxy), then authorize and resolve before anything.

        A browser page without credentials is sent to Jupyter's login; a WebSocket gets 403.
        """
        if self.request.headers.get("Upgrade", "").lower() == "websocket":
            kwargs["_redirect_to_login"] = False
        await super().prepare(*args, **kwargs)
        if self._finished:
            return  # sent to the login page
        try:
            await self._resolve(*self.path_args[:2])
        except BaiError as exc:
            self.set_status(exc.status)
            if exc.status == 503:
                self.set_header("Retry-After", "2")
            self.set_header("Content-Type", "application/json")
            self.finish(error_body(exc.code, exc.message))

    async def _admin(self, action: str) -> bool:
        return await self._allowed(ADMIN)

    async def _allowed(self, resource: str) -> bool:
        upgrade = self.request.headers.get("Upgrade", "").lower() == "websocket"
        action = HTTP_METHOD_TO_AUTH_ACTION["WEBSOCKET" if upgrade else self.request.method]
        return bool(
            await ensure_async(
                self.authorizer.is_authorized(self, self.current_user, action, resource)
            )
        )

    async def _resolve(self, session_id: str, service: str) -> None:
        if not await self._allowed(SESSIONS):
            raise Forbidden(f"not allowed to use {SESSIONS}")
        owner = str(self.current_user.username) if self.bai.multi_user else local_owner()
        api = self.bai.sessions_api(owner, self._admin, None)
        unknown = NotFound(f"no session {session_id!r} of {owner}")
        try:  # by id (cached: checked below) or, as the REST API takes it, by the caller's name
            session = await self.bai.running.get(api.get, session_id)
        except NotFound:
            raise unknown from None
        if session.owner != owner and not await self._allowed(ADMIN):
            raise unknown
        services = {s.name: s for s in session.spec.services}
        if service not in services:
            known = ", ".join(services) or "none"
            raise NotFound(f"session {session.id} has no service {service!r} (services: {known})")
        if not services[service].proxied:
            raise InvalidRequest(f"service {service!r} is raw tcp: it is not proxied over HTTP")
        require_running(session)
        self.target = session.service_address(services[service])
        if self.target is None:
            raise Unavailable(f"session {session.id}: main1's port of {service!r} is not known yet")
        host = self.target[0]
        # The key as the caller wrote it (id or name): redirects stay under that path.
        self.proxy_base = url_path_join("bai/sessions", session_id, "proxy", service)
        self.host_allowlist = [str(host)]

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = responses.get(status_code, "error")
        if isinstance(exc, HTTPError) and exc.log_message:
            message = exc.log_message
        code = {403: "forbidden", 404: "not-found", 502: "bad-gateway"}.get(status_code, "error")
        self.set_header("Content-Type", "application/json")
        self.finish(error_body(code, message))

    # --- what the service gets ----------------------------------------------------------------

    def proxy_request_headers(self) -> httputil.HTTPHeaders:
        """The request's headers without Jupyter's token, cookies and XSRF header."""
        headers = cast(httputil.HTTPHeaders, super().proxy_request_headers())
        for name in _JUPYTER_HEADERS:
            headers.pop(name, None)
        if _JUPYTER_AUTH.match(headers.get("Authorization", "")):
            headers.pop("Authorization")
        if "Cookie" in headers:
            kept = self._service_cookies(headers["Cookie"])
            headers.pop("Cookie")
            if kept:
                headers["Cookie"] = kept
        return headers

    def _service_cookies(self, header: str) -> str:
        jupyter = {"_xsrf", self.cookie_name}
        try:
            cookies = SimpleCookie(header)
        except CookieError:
            return ""
        return "; ".join(
            f"{name}={morsel.coded_value}"
            for name, morsel in cookies.items()
            if name not in jupyter and not name.startswith("jupyterhub-")
        )

    def get_client_uri(self, protocol: str, host: str, port: int, proxied_path: str) -> str:
        query = self.request.query
        if query:
            kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True)]
            self.request.query = urlencode([(k, v) for k, v in kept if k not in _JUPYTER_QUERY])
        try:
            return cast(str, super().get_client_uri(protocol, host, port, proxied_path))
        finally:
            self.request.query = query

    def check_xsrf_cookie(self) -> None:
        """The service checks its own requests; Jupyter's XSRF token is not its business."""

    # --- the methods --------------------------------------------------------------------------

    def _where(self) -> tuple[str, int]:
        assert self.target is not None  # set by prepare, which finishes the request otherwise
        return self.target

    @web.authenticated
    @authorized
    async def get(self, session_id: str, service: str, path: str = "") -> None:
        """HTTP GET, or the WebSocket handshake (then :meth:`open`)."""
        await super().get(session_id, service, path)

    async def http_get(self, session_id: str, service: str, path: str = "") -> None:
        await self.proxy(*self._where(), path)

    @web.authenticated
    @authorized
    async def post(self, session_id: str, service: str, path: str = "") -> None:
        await self.proxy(*self._where(), path)

    @web.authenticated
    @authorized
    async def put(self, session_id: str, service: str, path: str = "") -> None:
        await self.proxy(*self._where(), path)

    @web.authenticated
    @authorized
    async def patch(self, session_id: str, service: str, path: str = "") -> None:
        await self.proxy(*self._where(), path)

    @web.authenticated
    @authorized
    async def delete(self, session_id: str, service: str, path: str = "") -> None:
        await self.proxy(*self._where(), path)

    @web.authenticated
    @authorized
    async def head(self, session_id: str, service: str, path: str = "") -> None:
        await self.proxy(*self._where(), path)

    @web.authenticated
    @authorized
    async def options(self, session_id: str, service: str, path: str = "") -> None:
        await self.proxy(*self._where(), path)

    async def open(self, session_id: str, service: str, path: str = "") -> None:
        """The WebSocket side, after :meth:`get` and ``prepare`` let the handshake through."""
        await self.proxy_open(*self._where(), path)

    async def _proxy_buffered(
        self, host: str, port: int, proxied_path: str, body: bytes | None, client: Any
    ) -> None:
        """Stream the reply as it comes (the parent class would buffer it whole)."""
        client.close()  # the parent's fresh client per request: ours is shared
        started = False
        head: dict[str, Any] = {}

        def on_header(line: str) -> None:
            if line.startswith("HTTP/"):
                head.clear()
                head["start"] = httputil.parse_response_start_line(line.strip())
                head["headers"] = httputil.HTTPHeaders()
            elif line.strip() and "headers" in head:
                head["headers"].parse_line(line)

        def send_head() -> None:
            nonlocal started
            if started or "start" not in head:
                return
            started = True
            start = head["start"]
            self.set_status(start.code, start.reason)
            self._headers = httputil.HTTPHeaders()
            for name, value in head["headers"].get_all():
                if name in _FRAMING:
                    continue
                if name == "Location" and start.code in (301, 302, 303, 307, 308):
                    value = self._rewrite_location_header(value, host, port, proxied_path)
                self.add_header(name, value)

        pending = 0

        def on_chunk(chunk: bytes) -> None:
            nonlocal pending
            if self.client_gone:
                raise _ClientGone("the caller closed the connection")
            send_head()
            self.write(chunk)
            pending += len(chunk)
            # A short read means the service paused: pass on what came (streams, events).
            # Full reads mean more is waiting: send in bigger writes.
            if len(chunk) < _READ_CHUNK or pending >= _FLUSH_AT:
                self.flush()
                pending = 0

        request = self._build_proxy_request(
            host,
            port,
            proxied_path,
            body,
            header_callback=on_header,
            streaming_callback=on_chunk,
        )
        request.request_timeout = self.bai.proxy_timeout or None
        request.connect_timeout = self.connect_timeout
        error: BaseException | None
        try:
            response = await self.bai.upstream().fetch(request, raise_error=False)
        except (httpclient.HTTPError, OSError) as exc:
            error = exc
        else:  # an HTTP error status is the service's answer; 599 is no answer
            error = response.error
            if isinstance(error, httpclient.HTTPError) and error.code != 599:
                error = None
        if self.client_gone:
            return  # nobody to answer: the upstream connection is closed already
        if error is not None:
            if started:
                return  # the head is out: all we can do is end the body early
            # OSError: nothing listens (refused, unreachable); tornado raises it as is.
            if isinstance(error, OSError) or "connect" in str(error):
                raise ServiceUnreachable(f"the service did not answer: {error}")
            raise HTTPError(502, f"the service did not answer: {error}")
        send_head()
        self._record_activity()

    #: Server-Sent Events take the same streaming path.
    _proxy_progressive = _proxy_buffered
