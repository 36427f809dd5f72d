"""``bai-jupyter manager``: one session manager for many users, as a process of its own.

It serves the same routes as the server extension (``/bai/api/v1/…``, the event
stream, the OpenAPI description, the service-port proxy) with the same
handlers, under ``base_url`` (a JupyterHub service's prefix). Under a Hub
(``JUPYTERHUB_API_TOKEN`` set, as for every Hub-managed service) every call is
authenticated by the Hub; alone, by the tokens of ``TokenIdentity.users``. The
manager is configured as everywhere: ``c.BaiSessionManager.*`` in the config
file (``--config``).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
from typing import Any

from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpserver import HTTPServer
from traitlets import Enum, Int, Unicode

from ..cli.base import ALIASES, FLAGS, BaiCommand
from ..manager import BaiSessionManager
from ..registry import local_owner
from ..server.host import NAME, ApiHost, ManagerStartFailed, Step
from ..server.routes import routes
from .auth import CallerAuthorizer, HubIdentity, TokenIdentity
from .health import HealthHandler

__all__ = ["ManagerService"]


class ManagerService(BaiCommand, ApiHost):
    """``bai-jupyter manager``: the shared manager service (under a JupyterHub, or alone)."""

    name = "bai-jupyter manager"
    description = (
        "Run one session manager for many users: the REST API, event stream and "
        "service-port proxy of the server extension, as a process of its own (a "
        "JupyterHub service, or alone with tokens of its own). Single-user servers "
        "with BaiJupyterApp.manager_url (or BAI_JUPYTER_MANAGER_URL) use it."
    )
    usage = "bai-jupyter manager [--ip IP] [--port PORT] [--base-url PATH] [--config FILE]"
    classes = [BaiSessionManager, HubIdentity, TokenIdentity]  # noqa: RUF012
    aliases = {  # noqa: RUF012 (traitlets' own class attribute)
        **ALIASES,
        "ip": ("ManagerService.ip", "Address to listen on."),
        "port": ("ManagerService.port", "Port to listen on."),
        "base-url": ("ManagerService.base_url", "Path prefix of every route."),
    }
    flags = FLAGS

    ip = Unicode("127.0.0.1", config=True, help="Address to listen on.")
    port = Int(
        0,
        config=True,
        help="Port to listen on. 0: the Hub's (JUPYTERHUB_SERVICE_URL) when run as a Hub "
        "service, else 8890.",
    )
    base_url = Unicode(
        "",
        config=True,
        help="Path prefix of every route. Empty: JUPYTERHUB_SERVICE_PREFIX under a Hub, else /.",
    )
    auth = Enum(
        ["auto", "hub", "tokens"],
        "auto",
        config=True,
        help="How callers are authenticated: by the Hub ('hub'), by TokenIdentity.users "
        "('tokens'), or by the Hub when JUPYTERHUB_API_TOKEN is set, else tokens ('auto').",
    )
    cookie_secret_file = Unicode(
        "",
        config=True,
        help="A file holding the secret that signs this service's cookies (the Hub's OAuth "
        "state and sign-in), as hex (JupyterHub's format). Empty: a new random secret per "
        "start, right for one process. Replicas behind a load balancer must share one file: "
        "else a browser's sign-in fails whenever its callback or next request reaches "
        "another replica.",
    )

    def _multi_user_default(self) -> bool:
        return True  # every caller is their own owner

    def own_url(self) -> str:
        return f"http://{self.ip}:{self._port()}{self._base_url()}"

    def _public_url_default(self) -> str:
        # A managed Hub service gets its public URL from the Hub when JupyterHub.public_url
        # is set: the links %bai prints then go through the Hub's proxy, not this port.
        return os.environ.get("BAI_JUPYTER_PUBLIC_URL") or os.environ.get(
            "JUPYTERHUB_PUBLIC_URL", ""
        )

    def _under_hub(self) -> bool:
        if self.auth == "auto":
            return bool(os.environ.get("JUPYTERHUB_API_TOKEN"))
        return self.auth == "hub"

    def _base_url(self) -> str:
        base = self.base_url or os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "") or "/"
        return "/" + base.strip("/") + "/" if base.strip("/") else "/"

    def _port(self) -> int:
        if self.port:
            return self.port
        from urllib.parse import urlsplit

        hub_url = os.environ.get("JUPYTERHUB_SERVICE_URL", "")
        return urlsplit(hub_url).port or 8890 if hub_url else 8890

    def _identity(self) -> tuple[Any, list[tuple[str, Any, dict[str, Any]]]]:
        """The identity provider and any routes it needs (the Hub's OAuth callback)."""
        if self._under_hub():
            from jupyterhub.services.auth import (  # type: ignore[import-untyped]
                HubOAuthCallbackHandler,
            )

            from .auth import ServiceOAuth, hub_login_handler

            hub_auth = ServiceOAuth.instance()
            base = self._base_url()
            extra = [
                (url_path_join(base, "oauth_callback"), HubOAuthCallbackHandler, {}),
                (url_path_join(base, "login"), hub_login_handler(), {"hub_auth": hub_auth}),
            ]
            return HubIdentity(parent=self, hub_auth=hub_auth), extra
        identity = TokenIdentity(parent=self)
        if not identity.users:
            token = os.environ.get("BAI_JUPYTER_MANAGER_TOKEN") or secrets.token_hex(24)
            identity.users = {token: local_owner()}
            identity.admin_users = [local_owner()]
            if "BAI_JUPYTER_MANAGER_TOKEN" not in os.environ:
                print(f"bai-jupyter manager: token for {local_owner()}: {token}", flush=True)
        return identity, []

    def _cookie_secret(self) -> bytes:
        """The configured secret (read once, at start), else a random one."""
        if not self.cookie_secret_file:
            return secrets.token_bytes(32)
        from pathlib import Path

        text = Path(self.cookie_secret_file).read_text().strip()
        try:
            secret = bytes.fromhex(text)
        except ValueError:
            raise SystemExit(
                f"bai-jupyter manager: {self.cookie_secret_file} (cookie_secret_file) must "
                "hold hex digits, e.g. the output of `openssl rand -hex 32`"
            ) from None
        if len(secret) < 32:
            raise SystemExit(
                f"bai-jupyter manager: {self.cookie_secret_file} (cookie_secret_file) holds "
                f"{len(secret)} bytes; give at least 32 (`openssl rand -hex 32`)"
            )
        return secret

    def make_app(self) -> web.Application:
        """The tornado application: the extension's routes under ``base_url``, its settings."""
        base = self._base_url()
        identity, extra = self._identity()
        settings: dict[str, Any] = {
            **self.app_settings(base),
            "identity_provider": identity,
            "authorizer": CallerAuthorizer(parent=self),
            "cookie_secret": self._cookie_secret(),  # shared by replicas when configured
        }
        if self._under_hub():
            settings["hub_auth"] = identity.hub_auth
        handlers: list[Any] = []
        for pattern, handler, *kwargs in routes(self):
            if pattern == r"/api/sessions":
                continue  # Jupyter's own sessions route: no Jupyter server here
            args = dict(kwargs[0]) if kwargs else {}
            if issubclass(handler, ExtensionHandlerMixin):
                args["name"] = NAME  # as ExtensionApp gives its own handlers
            handlers.append((url_path_join(base, pattern), handler, args))
        handlers.append((url_path_join(base, "health"), HealthHandler, {"host": self}))
        handlers.extend(extra)
        return web.Application(handlers, **settings)

    def run(self) -> int:
        self.manager = BaiSessionManager(parent=self, log=self.log)
        self.init_host()
        return asyncio.run(self._serve())

    async def _serve(self) -> int:
        app = self.make_app()
        server = HTTPServer(app, xheaders=True)
        port = self._port()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        try:
            await self.start_manager(app.settings, port)
            # Listen only now: a load balancer (or the Hub's proxy) sends nothing to a
            # replica still starting, whose every answer would be a 503.
            server.listen(port, self.ip)
            print(f"bai-jupyter manager: serving {self.own_url()}", flush=True)
            await stop.wait()
        except ManagerStartFailed:
            return 1  # its reason is the one line logged: a service without a manager exits
        finally:
            server.stop()
            steps: list[Step] = self.stop_steps()
            await self.run_steps(steps)
        return 0
