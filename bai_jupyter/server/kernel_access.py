"""The REST API as kernels reach it: `%bai` inside ``main1`` calls home.

A kernel cannot use the server's own address or token: Jupyter usually listens
on loopback only, and its token opens everything (terminals, files, every
kernel). So the extension serves the bai API routes alone on the host address
the agents' kernels reach (the Docker egress network's gateway, loopback for
the local backend), behind per-session tokens. Every kernel gets
``BAI_JUPYTER_URL`` and ``BAI_JUPYTER_TOKEN`` for it.

A token ``bai2.<session id>.<issued ms>.<mac>`` is signed with the store's secret
and checked against the store on every request: it works only while its session
lives (not ended) and was not revoked, also across server restarts. It grants
that one session (read, logs, execute, interrupt, restart, destroy), listing and
(``BaiJupyterApp.kernel_tokens_create_sessions``) creating sessions of the same
owner, and the owner's templates; never another session, never the admin resource.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import IdentityProvider, User
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from ..errors import Forbidden
from ..model import Session
from .base import SESSIONS, TEMPLATES

__all__ = ["KernelAccess", "SessionTokens", "child_key", "revoked_key"]

_PREFIX = "bai2."
_OLD_PREFIX = "bai1."


def child_key(session_id: str) -> str:
    """The store meta key naming the session whose kernel token created ``session_id``."""
    return f"kernel-token-child:{session_id}"


def revoked_key(session_id: str) -> str:
    """The store meta key holding when a session's kernel tokens were last revoked (ms)."""
    return f"kernel-tokens-revoked:{session_id}"


class SessionTokens:
    """``bai2.<session id>.<issued ms>.<mac>``: a session's kernel token, signed by the store.

    The signature only proves the store minted it; whether it still grants anything
    (session alive, not revoked) is decided against the store on every request.
    """

    def __init__(self, secret: str) -> None:
        self._key = secret.encode()

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()

    def mint(self, session_id: str, issued_ms: int | None = None) -> str:
        issued = int(time.time() * 1000) if issued_ms is None else issued_ms
        body = f"{session_id}.{issued}"
        return f"{_PREFIX}{body}.{self._mac(body)}"

    def parse(self, token: str | None) -> tuple[str, int] | None:
        """``(session id, issued ms)`` of a well-signed token; ``None`` for anything else."""
        if not token or not token.startswith(_PREFIX):
            return None
        body, _, mac = token[len(_PREFIX) :].rpartition(".")
        session_id, _, issued = body.rpartition(".")
        if not session_id or not issued.isdigit():
            return None
        if not hmac.compare_digest(mac, self._mac(body)):
            return None
        return session_id, int(issued)


#: Looks a session and the time its kernel tokens were revoked (ms, or None) up.
Lookup = Callable[[str], Awaitable[tuple[Session | None, int | None]]]
#: Was the session ``key`` (id or name, of ``owner``) created by the token of ``parent``?
ChildCheck = Callable[[str, str, str], Awaitable[bool]]


class _SessionIdentity(IdentityProvider):
    """Knows only session tokens: a kernel acts as its session's owner, for that session."""

    def __init__(self, tokens: SessionTokens, lookup: Lookup, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._tokens = tokens
        self._lookup = lookup

    async def get_user(self, handler: web.RequestHandler) -> User | None:
        token = self.get_token(handler)
        if token and token.startswith(_OLD_PREFIX):
            raise Forbidden(
                "the kernel token format changed (bai1 tokens are no longer accepted): "
                "restart the kernel to get a new BAI_JUPYTER_TOKEN"
            )
        parsed = self._tokens.parse(token)
        if parsed is None:
            return None
        session_id, issued = parsed
        session, revoked = await self._lookup(session_id)
        if session is None or session.id != session_id:
            raise Forbidden(f"this kernel token's session {session_id} does not exist")
        if session.status.is_terminal:
            raise Forbidden(
                f"this kernel token's session {session_id} has ended ({session.status.value})"
            )
        if revoked is not None and issued <= revoked:
            raise Forbidden(f"this kernel token of session {session_id} was revoked")
        user = User(username=session.owner, name=session.owner)
        user.bai_session = session  # type: ignore[attr-defined]
        return user

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        return True  # no cookies here: no XSRF check needed


class _SessionScope(Authorizer):
    """The token's own session and those it created; the owner's list, create, templates.

    Never another session (not even of the same owner), never the admin resource.
    """

    def __init__(
        self, create_sessions: Callable[[], bool], is_child: ChildCheck, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._create_sessions = create_sessions
        self._is_child = is_child

    async def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        if resource == TEMPLATES:
            return True
        session: Session | None = getattr(user, "bai_session", None)
        if resource != SESSIONS or session is None:
            return False
        keys = list(handler.path_args or ()) or list(handler.path_kwargs.values())
        if keys:  # a route about one session (by id or name)
            own = keys[0] in (session.id, session.name)
            if not own and not await self._is_child(keys[0], session.owner, session.id):
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
        self,
        secret: str,
        lookup: Lookup,
        is_child: ChildCheck,
        create_sessions: Callable[[], bool] = lambda: True,
    ) -> None:
        self.tokens = SessionTokens(secret)
        self._is_child = is_child
        self._lookup = lookup
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
                "identity_provider": _SessionIdentity(self.tokens, self._lookup),
                "authorizer": _SessionScope(self._create_sessions, self._is_child),
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

    def ports(self) -> list[int]:
        """The ports listened on (what the host firewall lets kernels reach)."""
        return sorted({s.getsockname()[1] for s in self._sockets})

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
