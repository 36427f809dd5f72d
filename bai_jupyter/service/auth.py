"""Who calls the manager service: a Hub user (token or OAuth cookie), or a known token.

Jupyter's identity-provider and authorizer interfaces, so the same handlers
decide the same way in a Jupyter server and here. Every authenticated caller
may use the sessions and templates resources (as their own owner); only an
admin gets ``bai_jupyter:admin`` (everyone's sessions, shared templates).
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from traitlets import Any as AnyTrait
from traitlets import Dict, Float, List, Unicode

from ..server.base import ADMIN

__all__ = ["CallerAuthorizer", "HubIdentity", "TokenIdentity"]


def _caller(name: str, admin: bool, groups: list[str]) -> User:
    user = User(username=name, name=name)
    user.bai_admin = admin  # type: ignore[attr-defined]
    user.bai_groups = groups  # type: ignore[attr-defined]
    return user


class CallerAuthorizer(Authorizer):
    """Sessions and templates for every caller (their own); the admin resource for admins."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        if resource == ADMIN:
            return bool(getattr(user, "bai_admin", False))
        return True


class TokenIdentity(IdentityProvider):
    """Callers named by the tokens the operator gave them (a team without JupyterHub)."""

    users = Dict(
        Unicode(),
        config=True,
        help="Token → user name: each token acts as that user (an owner of sessions).",
    )
    admin_users = List(
        Unicode(), config=True, help="User names that may act on everyone's sessions."
    )

    async def get_user(self, handler: web.RequestHandler) -> User | None:
        given = self.get_token(handler) or ""
        for token, name in self.users.items():
            if token and hmac.compare_digest(given, token):
                return _caller(name, name in self.admin_users, [])
        return None

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        return True  # no cookies: no XSRF check needed


@functools.cache
def _service_oauth() -> type:
    from jupyterhub.services.auth import HubOAuth  # type: ignore[import-untyped]

    class ServiceOAuth(HubOAuth):  # type: ignore[misc]
        """The Hub's OAuth, leaving XSRF to Jupyter's handlers.

        HubOAuth replaces the XSRF check of every Jupyter handler class with one that
        runs before the caller is known (tornado checks before ``prepare``), which
        refuses token-authenticated POSTs; Jupyter's own check waits for the caller
        and skips tokens, as it does in a Jupyter server."""

        def _patch_xsrf(self, handler: Any) -> None:
            return None

    return ServiceOAuth


@functools.cache
def hub_login_handler() -> type[web.RequestHandler]:
    """The service's login page: runs the Hub's OAuth (no prompt for a signed-in Hub user),
    then sends the browser on to ``?next=`` (a path of this origin)."""
    from jupyterhub.services.auth import HubOAuthenticated

    class HubLogin(HubOAuthenticated, web.RequestHandler):  # type: ignore[misc]
        def initialize(self, hub_auth: Any) -> None:
            self.hub_auth = hub_auth

        async def get(self) -> None:
            target = self.get_argument("next", self.settings["base_url"])
            if not target.startswith("/") or target.startswith("//"):
                target = self.settings["base_url"]  # never off this origin
            if await self.hub_auth.get_user(self, sync=False):
                self.redirect(target)
            else:  # back here after the Hub's callback, then on to the target
                self.redirect(self.get_login_url())

    return HubLogin


def __getattr__(name: str) -> Any:
    if name == "ServiceOAuth":  # jupyterhub is imported only under a Hub
        return _service_oauth()
    raise AttributeError(name)


def needed_scope(scopes: Iterable[str]) -> str:
    """The one access scope to grant, for the 403 message: this service's own
    (``access:services!service=NAME``), never the bare ``access:services``, which any
    of the Hub's scopes set contains too and which would open every service."""
    return min(sorted(scopes), key=lambda scope: "!service=" not in scope)


class HubIdentity(IdentityProvider):
    """Hub users, from their tokens (servers, scripts) or the Hub's OAuth cookie (browsers).

    A caller needs the access scope of this service (``access:services!service=NAME``).
    Whether they are an admin and which Hub groups they are in is asked of the Hub
    with the service's own token (cached for ``user_info_ttl`` seconds): Hub admins
    are admins here, and so are ``admin_users``.
    """

    hub_auth = AnyTrait(help="The service's jupyterhub.services.auth.HubOAuth.")
    admin_users = List(
        Unicode(),
        config=True,
        help="Hub user names that may act on everyone's sessions besides the Hub's admins.",
    )
    user_info_ttl = Float(
        30.0, config=True, help="Seconds a Hub user's admin flag and groups are remembered."
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._info: dict[str, tuple[float, bool, list[str]]] = {}

    async def get_user(self, handler: web.RequestHandler) -> User | None:
        model: Mapping[str, Any] | None = await self.hub_auth.get_user(handler, sync=False)
        if not model:
            return None
        scopes = self.hub_auth.access_scopes
        if scopes and not self.hub_auth.check_scopes(scopes, model):
            name = model.get("name")
            raise web.HTTPError(403, f"Hub user {name} lacks the scope {needed_scope(scopes)}")
        name = str(model["name"])
        admin, groups = await self._user_info(name)
        if getattr(handler, "_token_authenticated", False):
            handler._bai_token = True  # type: ignore[attr-defined]
        return _caller(name, admin or name in self.admin_users, groups)

    async def _user_info(self, name: str) -> tuple[bool, list[str]]:
        """The Hub's admin flag and groups of ``name`` (asked with the service's token)."""
        cached = self._info.get(name)
        if cached is not None and time.monotonic() - cached[0] < self.user_info_ttl:
            return cached[1], cached[2]
        url = f"{self.hub_auth.api_url.rstrip('/')}/users/{name}"
        headers = {"Authorization": f"token {self.hub_auth.api_token}"}
        try:
            reply = await AsyncHTTPClient().fetch(url, headers=headers, request_timeout=10)
        except (HTTPClientError, OSError, asyncio.TimeoutError) as exc:
            self.log.warning("bai-jupyter: asking the Hub about user %s failed: %s", name, exc)
            return False, []
        model = json.loads(reply.body)
        admin, groups = bool(model.get("admin")), sorted(model.get("groups") or [])
        self._info[name] = (time.monotonic(), admin, groups)
        return admin, groups

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        # A token-authenticated call needs no XSRF check; a cookie (browser) one does.
        return bool(getattr(handler, "_token_authenticated", False))
