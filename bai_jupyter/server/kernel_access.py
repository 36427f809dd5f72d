"""The REST API as kernels reach it: `%bai` inside ``main1`` calls home.

A kernel cannot use the server's own address or token: Jupyter usually listens
on loopback only, and its token opens everything (terminals, files, every
kernel). So the extension serves the bai API routes alone on the host address
the agents' kernels reach (the Docker egress network's gateway, loopback for
the local backend), behind per-session tokens. Every kernel gets
``BAI_JUPYTER_URL`` and ``BAI_JUPYTER_TOKEN`` for it.

A token (``bai_jupyter.manager.requests.tokens``) is checked against the store on every
request: it works only while its session lives (not ended) and was not revoked,
also across server restarts. It grants
that one session (read, logs, execute, interrupt, restart, destroy), listing and
(``BaiJupyterApp.kernel_tokens_create_sessions``) creating sessions and endpoints of
the same owner, the sessions and endpoints it created, and the owner's templates;
never another session or endpoint, never the admin resource. A key in a route is
resolved as the handler resolves it (``model.is_id_key``), then checked.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import IdentityProvider, User
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from ..errors import Forbidden
from ..manager.requests.tokens import KernelTokens
from ..model import Session
from .base import SESSIONS, TEMPLATES

__all__ = ["KernelAccess"]


class _SessionIdentity(IdentityProvider):
    """Knows only session tokens: a kernel acts as its session's owner, for that session."""

    def __init__(self, tokens: KernelTokens, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._tokens = tokens

    async def get_user(self, handler: web.RequestHandler) -> User | None:
        session = await self._tokens.session_of(self.get_token(handler))
        if session is None:
            return None
        user = User(username=session.owner, name=session.owner)
        user.bai_session = session  # type: ignore[attr-defined]
        return user

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        return True  # no cookies here: no XSRF check needed


class _SessionScope(Authorizer):
    """The token's own session and the sessions and endpoints it created; the owner's
    lists, create, templates.

    Never another session or endpoint (not even of the same owner), never the admin
    resource; a handler whose key kind it does not know is refused.
    """

    def __init__(
        self, create_sessions: Callable[[], bool], tokens: KernelTokens, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._create_sessions = create_sessions
        self._tokens = tokens

    async def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        if resource == TEMPLATES:
            return True
        session: Session | None = getattr(user, "bai_session", None)
        if resource != SESSIONS or session is None:
            return False
        keys = list(handler.path_args or ()) or list(handler.path_kwargs.values())
        if keys:  # a route about one session or one endpoint: what its key resolves to
            kind = getattr(handler, "path_key", None)
            if kind == "endpoint":
                if not await self._tokens.grants_endpoint(keys[0], session):
                    raise Forbidden(
                        f"a kernel token grants only the endpoints it created, not {keys[0]!r}"
                    )
                return True
            if kind != "session" or not await self._tokens.grants(keys[0], session):
                raise Forbidden(
                    f"a kernel token grants only its own session ({session.id}) "
                    "and the sessions it created"
                )
            return True
        if handler.request.method == "POST" and not self._create_sessions():
            raise Forbidden(
                "kernel tokens may not create sessions on this server "
                "(BaiJupyterApp.kernel_tokens_create_sessions is off)"
            )
        return True


class KernelAccess:
    """Listeners on the kernels' host addresses serving the API routes with session tokens."""

    def __init__(
        self, tokens: KernelTokens, create_sessions: Callable[[], bool] = lambda: True
    ) -> None:
        self.tokens = tokens
        self._create_sessions = create_sessions
        self._servers: list[HTTPServer] = []
        self._sockets: list[socket.socket] = []
        #: Host address → the base URL kernels use there.
        self.urls: dict[str, str] = {}

    def start(
        self,
        addresses: Iterable[str],
        settings: dict[str, Any],
        routes: Sequence[tuple[str, type[web.RequestHandler]]],
        handler_kwargs: dict[str, Any],
        port: int,
    ) -> None:
        """Listen on each address with an app of ``routes`` only.

        On ``port`` (the server's own) where it is free there, so that the URL kernels
        were given survives a server restart; else on any free port.
        """
        base_url = settings.get("base_url", "/")
        app = web.Application(
            [
                (url_path_join(base_url, pattern), handler, handler_kwargs)
                for pattern, handler in routes
            ],
            **{
                **settings,
                "identity_provider": _SessionIdentity(self.tokens),
                "authorizer": _SessionScope(self._create_sessions, self.tokens),
                "allow_remote_access": True,
                "allow_unauthenticated_access": False,
            },
        )
        for address in sorted(set(addresses)):
            try:
                sockets = bind_sockets(port, address)
            except OSError:  # taken there (e.g. the server listens on every address)
                sockets = bind_sockets(0, address)
            server = HTTPServer(app, xheaders=False)
            server.add_sockets(sockets)
            self._sockets.extend(sockets)
            self._servers.append(server)
            port = sockets[0].getsockname()[1]
            self.urls[address] = f"http://{address}:{port}{base_url}"

    def listeners(self) -> list[tuple[str, int]]:
        """The (address, port) listened on: what the host firewall lets kernels reach."""
        return sorted({(str(s.getsockname()[0]), int(s.getsockname()[1])) for s in self._sockets})

    def environ(self, session_id: str, address: str | None) -> dict[str, str]:
        """What a kernel of ``session_id`` reaching the host at ``address`` needs to call home."""
        url = self.urls.get(address or "")
        if url is None:
            return {}
        return {"BAI_JUPYTER_URL": url, "BAI_JUPYTER_TOKEN": self.tokens.mint(session_id)}

    def stop(self) -> None:
        for server in self._servers:
            server.stop()
        self._servers.clear()
        self._sockets.clear()
        self.urls.clear()
