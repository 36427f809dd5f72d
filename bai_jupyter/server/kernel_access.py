"""The REST API as kernels reach it: `%bai` inside ``main1`` calls home.

A kernel cannot use the server's own address or token: Jupyter usually listens
on loopback only, and its token opens everything (terminals, files, every
kernel). So the extension serves the bai API routes alone on the host address
the agents' kernels reach (the Docker egress network's gateway, loopback for
the local backend), behind tokens that each name one owner and grant only that
owner's sessions and templates. Every kernel gets ``BAI_JUPYTER_URL`` and
``BAI_JUPYTER_TOKEN`` for it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import socket
from collections.abc import Iterable, Sequence
from typing import Any

from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import IdentityProvider, User
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from .base import SESSIONS, TEMPLATES

__all__ = ["KernelAccess", "OwnerTokens"]

_PREFIX = "bai1."


class OwnerTokens:
    """``bai1.<owner>.<mac>``: stateless tokens that name their owner, signed by the store."""

    def __init__(self, secret: str) -> None:
        self._key = secret.encode()

    def _mac(self, owner_part: str) -> str:
        return hmac.new(self._key, owner_part.encode(), hashlib.sha256).hexdigest()

    def mint(self, owner: str) -> str:
        part = base64.urlsafe_b64encode(owner.encode()).decode().rstrip("=")
        return f"{_PREFIX}{part}.{self._mac(part)}"

    def owner_of(self, token: str | None) -> str | None:
        """The owner a valid token names; ``None`` for anything else."""
        if not token or not token.startswith(_PREFIX):
            return None
        part, _, mac = token[len(_PREFIX) :].partition(".")
        if not hmac.compare_digest(mac, self._mac(part)):
            return None
        try:
            return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None


class _OwnerIdentity(IdentityProvider):
    """Knows only owner tokens: a kernel is its owner, nobody else."""

    def __init__(self, tokens: OwnerTokens, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._tokens = tokens

    async def get_user(self, handler: web.RequestHandler) -> User | None:
        owner = self._tokens.owner_of(self.get_token(handler))
        return None if owner is None else User(username=owner, name=owner)

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        return True  # no cookies here: no XSRF check needed


class _OwnerScope(Authorizer):
    """Sessions and templates of the token's owner; never the admin resource."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource in (SESSIONS, TEMPLATES)


class KernelAccess:
    """Listeners on the kernels' host addresses serving the API routes with owner tokens."""

    def __init__(self, secret: str) -> None:
        self.tokens = OwnerTokens(secret)
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
                "identity_provider": _OwnerIdentity(self.tokens),
                "authorizer": _OwnerScope(),
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

    def environ(self, owner: str, address: str | None) -> dict[str, str]:
        """What a kernel of ``owner`` reaching the host at ``address`` needs to call home."""
        url = self.urls.get(address or "")
        if url is None:
            return {}
        return {"BAI_JUPYTER_URL": url, "BAI_JUPYTER_TOKEN": self.tokens.mint(owner)}

    def stop(self) -> None:
        for server in self._servers:
            server.stop()
        self._servers.clear()
        self._sockets.clear()
        self.urls.clear()
