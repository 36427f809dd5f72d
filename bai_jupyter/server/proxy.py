"""``/bai/sessions/{id or name}/proxy/{service}/…``: a service port of main1, HTTP and WebSocket.

What it guarantees: the target comes from the session (never from the URL), the
caller must own the session, Jupyter's credentials stay here, reply bodies
stream (a slow caller slows the reads from the service: nothing is held whole),
the service's connections are kept alive, and a caller who leaves ends the
exchange with the service at once.

A Jupyter handler of its own rather than jupyter-server-proxy's ProxyHandler:
that one is also a WebSocketHandler (built and wrapped on every request), goes
through tornado's HTTP client and decodes and re-frames every WebSocket
message, which was most of the proxy's time. What passes each way is in
:mod:`.forward`, the wire work in :mod:`.relay`, the connections in :mod:`.upstream`.
"""

from __future__ import annotations

from asyncio import Future
from datetime import datetime, timezone
from http.client import responses
from typing import Any, cast

from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.utils import HTTP_METHOD_TO_AUTH_ACTION
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import ensure_async, url_path_join
from tornado import httputil, web
from tornado.http1connection import HTTP1Connection
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream, StreamClosedError
from tornado.web import HTTPError

from ..errors import BaiError, Forbidden, InvalidRequest, NotFound, Unavailable
from ..registry import local_owner
from .base import ADMIN, SESSIONS, error_body
from .checks import require_running
from .forward import (
    jupyter_auth,
    reply_headers,
    service_headers,
    service_target,
    without_credentials,
)
from .redact import RedactedLog
from .relay import pipe, relay_body, request_head
from .upstream import IDEMPOTENT, KeepAliveClient, Unreachable

__all__ = ["ServiceUnreachable", "SessionProxyHandler"]


class ServiceUnreachable(HTTPError):
    """The service was not reached (refused, unreachable, no connection in time): the
    request never went out, so it may go to another replica."""

    def __init__(self, message: str) -> None:
        super().__init__(502, message)


class SessionProxyHandler(RedactedLog, JupyterHandler):
    """Proxies to the service's port on main1, once the caller is allowed."""

    auth_resource = SESSIONS
    #: Seconds to connect to the service.
    connect_timeout = 20.0

    def initialize(self, app: Any) -> None:
        self.bai = app
        self.target: tuple[str, int] | None = None
        #: Where the service is served from, under the server's base URL.
        self.proxy_base = ""
        #: The connection to the service while an exchange is under way.
        self.upstream: IOStream | None = None
        self.client_gone = False
        self.timed_out = False
        #: The caller's API and the session, for the idle rules' activity notes.
        self.user_of: tuple[Any, str] | None = None

    def on_connection_close(self) -> None:
        """The caller left: end the exchange with the service now (streams, downloads)."""
        self.client_gone = True
        if self.upstream is not None:
            self.upstream.close()
        super().on_connection_close()

    # --- who may go where ---------------------------------------------------------------------

    async def prepare(self) -> None:  # type: ignore[override]
        """Authenticate, then authorize and resolve before anything.

        A browser page without credentials is sent to Jupyter's login; a WebSocket gets 403.
        """
        upgrade = self._upgrade()
        await super().prepare(_redirect_to_login=not upgrade)
        if self._finished:
            return  # sent to the login page
        if not self.current_user:  # also where the server lets anyone in: never the proxy
            if upgrade:
                raise HTTPError(403)
            web.authenticated(lambda handler: None)(self)  # the login page, or 403
            return
        if self._token_in_url():
            return
        try:
            await self._resolve(*self.path_args[:2])
        except BaiError as exc:
            self.set_status(exc.status)
            if exc.status == 503:
                self.set_header("Retry-After", "2")
            self.set_header("Content-Type", "application/json")
            self.finish(error_body(exc.code, exc.message, exc.field))

    def _token_in_url(self) -> bool:
        """A page asked for with Jupyter's token in its URL is sent to the same URL without
        it (the login cookie, if the server keeps one, goes with the redirect): the page's
        script never finds the token in its ``location``. A WebSocket's URL is no page's."""
        kept = without_credentials(self.request.query)
        if (
            self.request.method not in ("GET", "HEAD")
            or self._upgrade()
            or kept == self.request.query
        ):
            return False
        self.set_header("Referrer-Policy", "no-referrer")
        self.redirect(self.request.path + (f"?{kept}" if kept else ""))
        return True

    def _upgrade(self) -> bool:
        return self.request.headers.get("Upgrade", "").lower() == "websocket"

    async def _admin(self, action: str) -> bool:
        return await self._allowed(ADMIN)

    async def _allowed(self, resource: str) -> bool:
        method = "WEBSOCKET" if self._upgrade() else str(self.request.method)
        action = HTTP_METHOD_TO_AUTH_ACTION[method]
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
        self.user_of = (api, session.id)
        self.bai.activity.note(api, session.id, "proxy")
        # The key as the caller wrote it (id or name): redirects stay under that path.
        self.proxy_base = url_path_join("bai/sessions", session_id, "proxy", service)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = responses.get(status_code, "error")
        if isinstance(exc, HTTPError) and exc.log_message:
            message = exc.log_message
        code = {403: "forbidden", 404: "not-found", 502: "bad-gateway"}.get(status_code, "error")
        self.set_header("Content-Type", "application/json")
        self.finish(error_body(code, message))

    def check_xsrf_cookie(self) -> None:
        """The service checks its own requests; Jupyter's XSRF token is not its business."""

    def set_secure_cookie(self, name: str, value: str | bytes, *args: Any, **kwargs: Any) -> None:
        """No login cookie for a caller that sent its token in a header: it sends the
        header again with every request, and signing the cookie was a tenth of what a
        proxied request costs here. A browser that came with ``?token=`` gets it."""
        if name == self.cookie_name and jupyter_auth(self.request.headers):
            return
        super().set_secure_cookie(name, value, *args, **kwargs)

    def _context(self) -> str:
        """Where the service is served from, with the server's base URL."""
        return url_path_join(self.base_url, self.proxy_base)

    def _ours(self) -> set[str]:
        """Jupyter's cookies: never passed to a service, nor set by one."""
        return {"_xsrf", self.cookie_name}

    def _request_head(self, path: str, body: bytes | None) -> bytes:
        upgrade = self.request.headers["Upgrade"] if self._upgrade() else None
        headers = service_headers(
            self.request.headers, self._ours(), self._context(), body, upgrade
        )
        target = service_target(path, self.request.query)
        return request_head(str(self.request.method), target, headers)

    # --- the methods --------------------------------------------------------------------------

    def _where(self) -> tuple[str, int]:
        assert self.target is not None  # set by prepare, which finishes the request otherwise
        return self.target

    async def _proxy(self, path: str) -> None:
        body = self.request.body or None
        if body is None and self.request.method in ("POST", "PUT", "PATCH"):
            body = b""
        await self._forward(*self._where(), path, body)

    @web.authenticated
    @authorized
    async def get(self, session_id: str, service: str, path: str = "") -> None:
        """HTTP GET, or a WebSocket's handshake and then its relay."""
        if self._upgrade():
            await self._relay_upgrade(*self._where(), path)
        else:
            await self._proxy(path)

    @web.authenticated
    @authorized
    async def post(self, session_id: str, service: str, path: str = "") -> None:
        await self._proxy(path)

    @web.authenticated
    @authorized
    async def put(self, session_id: str, service: str, path: str = "") -> None:
        await self._proxy(path)

    @web.authenticated
    @authorized
    async def patch(self, session_id: str, service: str, path: str = "") -> None:
        await self._proxy(path)

    @web.authenticated
    @authorized
    async def delete(self, session_id: str, service: str, path: str = "") -> None:
        await self._proxy(path)

    @web.authenticated
    @authorized
    async def head(self, session_id: str, service: str, path: str = "") -> None:
        await self._proxy(path)

    @web.authenticated
    @authorized
    async def options(self, session_id: str, service: str, path: str = "") -> None:
        await self._proxy(path)

    def on_close(self) -> None:
        """A relayed WebSocket ended: the session is no longer in use by it."""
        if self.user_of is not None:
            self.bai.activity.closed(self.user_of[1])
            self.user_of = None

    # --- the exchange -------------------------------------------------------------------------

    async def _forward(self, host: str, port: int, proxied_path: str, body: bytes | None) -> None:
        """One request to the service; the reply streams back as it comes (the endpoint
        proxy overrides it to try the next replica)."""
        head = self._request_head(proxied_path, body)
        if self.user_of is not None:  # a long download or stream keeps the session in use
            self.bai.activity.opened(*self.user_of)
        try:
            reuse = self.request.method in IDEMPOTENT
            await self._exchange(host, port, head + body if body else head, reuse)
        finally:
            if self.user_of is not None:
                self.bai.activity.closed(self.user_of[1])

    async def _relay_upgrade(self, host: str, port: int, proxied_path: str) -> None:
        """A WebSocket: the handshake goes to the service; once it answers 101 the two
        connections are relayed as bytes until either closes."""
        if not self.check_origin():
            raise HTTPError(403, "cross-origin WebSocket refused")
        upgraded = await self._exchange(host, port, self._request_head(proxied_path, None), False)
        if upgraded is None:
            return  # the service refused the upgrade: its reply went back as it was
        self.finish()  # the 101 goes out; then the connection is ours
        caller = self.detach()
        if self.user_of is not None:
            self.bai.activity.opened(*self.user_of)
        try:
            await pipe(caller, upgraded, self._record_activity)
        finally:
            self.on_close()

    async def _exchange(self, host: str, port: int, request: bytes, reuse: bool) -> IOStream | None:
        """Send ``request`` and pass the reply back; the service's connection after a 101."""
        timeout = self.bai.proxy_timeout or None
        loop = IOLoop.current()
        timer = loop.call_later(timeout, self._time_out) if timeout else None
        self._record_activity()
        try:
            sent = await self._send(host, port, request, reuse)
            if sent is None:
                return None
            stream, start, headers = sent
            if start.code == 101:
                if self._upgrade():
                    self._reply_head(start, headers)
                    return stream
                stream.close()
                raise HTTPError(502, "the service switched protocols unasked")
            self._reply_head(start, headers)
            connection = cast(HTTP1Connection, self.request.connection)
            caller = connection.stream

            def sink(piece: memoryview) -> Future[None] | None:
                self._record_activity()
                if self._headers_written:
                    written = connection.write(piece)  # type: ignore[arg-type]  # any buffer
                else:  # the head with the first piece: one write (a copy is cheaper)
                    self.write(bytes(piece))
                    written = self.flush()
                return written if caller.writing() else None  # not all sent: wait for it

            try:
                framed = await relay_body(stream, str(self.request.method), start, headers, sink)
            except (StreamClosedError, httputil.HTTPInputError) as exc:
                stream.close()
                if not self._gone():
                    if not self._headers_written:
                        raise self._bad_gateway(exc) from None
                    caller.close()  # the head is out: a cut reply must not look complete
                return None
            if reuse and framed and _reusable(start, headers) and not stream.writing():
                self._pool().keep(host, port, stream)
            else:
                stream.close()
            return None
        finally:
            self.upstream = None
            if timer is not None:
                loop.remove_timeout(timer)

    async def _send(
        self, host: str, port: int, request: bytes, reuse: bool
    ) -> tuple[IOStream, httputil.ResponseStartLine, httputil.HTTPHeaders] | None:
        """The request out and the reply's head in (None: the caller left meanwhile)."""
        try:
            return await self._pool().send(
                host, port, request, reuse, self.connect_timeout, self._track
            )
        except Unreachable as exc:
            raise ServiceUnreachable(f"the service did not answer: {exc}") from None
        except (StreamClosedError, httputil.HTTPInputError) as exc:
            if self._gone():
                return None
            raise self._bad_gateway(exc) from None

    def _track(self, stream: IOStream) -> None:
        self.upstream = stream
        if self._gone():
            stream.close()

    def _reply_head(self, start: httputil.ResponseStartLine, headers: httputil.HTTPHeaders) -> None:
        """The service's status and headers, to go out with the first piece of the body."""
        self.set_status(start.code, start.reason)
        self._headers = httputil.HTTPHeaders()
        csp = str(self.bai.proxy_csp)
        for name, value in reply_headers(start.code, headers, self._context(), self._ours(), csp):
            self.add_header(name, value)

    def _bad_gateway(self, exc: BaseException) -> HTTPError:
        if self.timed_out:
            limit = f"{self.bai.proxy_timeout:g} s (BaiJupyterApp.proxy_timeout)"
            return HTTPError(502, f"the service did not answer within {limit}")
        return HTTPError(502, f"the service did not answer: {exc or type(exc).__name__}")

    def _gone(self) -> bool:
        return self.client_gone or cast(HTTP1Connection, self.request.connection).stream.closed()

    def _time_out(self) -> None:
        self.timed_out = True
        if self.upstream is not None:
            self.upstream.close()

    def _pool(self) -> KeepAliveClient:
        pool: KeepAliveClient = self.bai.upstream()
        return pool

    def _record_activity(self) -> None:
        """Proxied traffic counts as use of this Jupyter server (its own idle culling)."""
        times = self.settings.setdefault("last_activity_times", {})
        times["bai_jupyter"] = datetime.now(timezone.utc)


def _reusable(start: httputil.ResponseStartLine, headers: httputil.HTTPHeaders) -> bool:
    """Whether the service keeps the connection open after this reply."""
    return start.version == "HTTP/1.1" and "close" not in headers.get("Connection", "").lower()
