"""The ``bai_jupyter`` Jupyter server extension: owns the session manager, serves the API.

The manager is configured through its own traits (``c.BaiSessionManager.store_url``,
``.agents``, ``.resource_groups``, ``.default_image`` …, also ``--BaiSessionManager.x``
on the command line): it is made with this app as its parent, so the server's
config reaches it, and the CLI reads the very same settings.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_server.auth.identity import IdentityProvider, User
from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import ensure_async
from tornado import web
from tornado.simple_httpclient import SimpleAsyncHTTPClient
from traitlets import Bool, Float, Instance, Int, Unicode

from ..manager import BaiSessionManager
from ..model import Session, Status
from ..registry import register_manager, request_user, unregister_manager
from ..store import Transaction
from .events import end_stream
from .execute import KernelRuns
from .kernel_access import KernelAccess, child_key, revoked_key
from .launches import LaunchErrorFilter
from .lookup import RunningSessions
from .routes import api_routes, routes
from .upstream import upstream_client

__all__ = ["BaiJupyterApp"]


def _remember_request_user(identity: IdentityProvider) -> None:
    """Note each request's Jupyter user where the kernel provisioner finds it.

    ``POST /api/kernels`` and ``/api/sessions`` start kernels in the request's own
    task, after Jupyter authenticated it here: so a kernel session started by a
    request is owned by the user who made it, not by the server's OS user.
    """
    get_user = identity.get_user

    async def remembering(handler: web.RequestHandler) -> User | None:
        user = await ensure_async(get_user(handler))
        if user is not None:
            request_user.set(str(user.username))
        return user

    identity.get_user = remembering  # type: ignore[method-assign]


class BaiJupyterApp(ExtensionApp):
    """Backend.AI-style compute sessions in this Jupyter server."""

    name = "bai_jupyter"
    load_other_extensions = True
    classes = [BaiSessionManager]  # noqa: RUF012 (traitlets' own class attribute)

    multi_user = Bool(
        False,
        config=True,
        help="Each authenticated user owns their own sessions (a shared server or a "
        "JupyterHub service). False: a single-user server, where every caller acts for "
        "the server's user (bai_jupyter.registry.local_owner), like the kernel provisioner.",
    )
    execute_chunk_timeout = Float(
        10.0,
        config=True,
        help="Seconds one call of the execute API waits for its run to finish before it "
        "returns what came so far with status 'continued'.",
    )
    execute_run_ttl = Float(
        600.0,
        config=True,
        help="Seconds a run of the execute API may go without being continued before it is "
        "dropped with its output (a client that went away must not make it pile up).",
    )
    kernel_connect_timeout = Float(
        30.0,
        config=True,
        help="Seconds the execute API waits for main1's Jupyter kernel to answer at first use.",
    )
    keepalive_interval = Float(
        15.0,
        config=True,
        help="Seconds between keep-alive comments on an idle event stream.",
    )
    proxy_timeout = Float(
        0.0,
        config=True,
        help="Seconds a proxied HTTP request may take in all (0: no limit; streams and "
        "long polls are common behind service ports).",
    )
    kernel_access = Bool(
        True,
        config=True,
        help="Let code in kernels (%bai in main1) call the API: serve it on the address the "
        "agents' kernels reach this host at, and give every kernel BAI_JUPYTER_URL and a "
        "BAI_JUPYTER_TOKEN that grants its own session, and its owner's templates and "
        "session list, only while that session lives (revocable).",
    )
    kernel_tokens_create_sessions = Bool(
        True,
        config=True,
        help="May a kernel's BAI_JUPYTER_TOKEN create sessions (for the session's owner, "
        "within the owner's limits)? Off: such a create gets 403 forbidden.",
    )
    public_url = Unicode(
        "",
        config=True,
        help="The server's URL as people open it (e.g. behind a proxy), for the links %bai "
        "prints in kernels. Empty: the BAI_JUPYTER_PUBLIC_URL environment variable, else "
        "the server's own connection URL.",
    )
    max_body_size = Int(
        1 << 20,
        config=True,
        help="Bytes a request body of the API may have; a bigger one gets 413 too-large. "
        "(The service proxy is not limited by this.)",
    )
    max_json_depth = Int(
        32,
        config=True,
        help="How deeply objects and arrays may nest in a JSON request body; deeper gets 400.",
    )
    max_meta_size = Int(
        16 * 1024,
        config=True,
        help="Bytes of a session's `meta` object (as JSON) a create request may carry; "
        "it is returned with every listing of the session.",
    )
    notebook_dir = Unicode(
        None,
        allow_none=True,
        config=True,
        help="Host directory mounted read-write at /home/work/notebooks in every kernel of "
        "a bai session started for a notebook, whose working directory is then the "
        "notebook's own folder there. Default (None): ServerApp.root_dir. '': none "
        "(kernels start in an empty /home/work). Refused, with a warning in the log, where "
        "the mount policy forbids it (e.g. '/', or a directory holding the store or the "
        "Jupyter data dir); not mounted on agents that do not share this host's files.",
    )
    manager = Instance(BaiSessionManager, allow_none=True, help="The manager this extension owns.")

    def initialize_settings(self) -> None:
        if self.serverapp is not None:  # failed bai launches: one warning line, no traceback
            self.serverapp.log.addFilter(LaunchErrorFilter())
        self.manager = BaiSessionManager(parent=self, log=self.log)
        #: Set once the manager has started and is registered: the API answers 503 until then.
        self.manager_ready = False
        root = self.notebook_dir
        if root is None and self.serverapp is not None:
            root = self.serverapp.root_dir
        self.manager.notebook_root = str(Path(root).expanduser().absolute()) if root else None
        self.runs = KernelRuns(
            self.execute_chunk_timeout, self.kernel_connect_timeout, self.execute_run_ttl, self.log
        )
        self.running = RunningSessions()
        self.streams: set[asyncio.Queue[Any]] = set()
        self._upstream: SimpleAsyncHTTPClient | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.access: KernelAccess | None = None

    def upstream(self) -> SimpleAsyncHTTPClient:
        """The proxy's client towards the services (made on first use, on the server's loop)."""
        if self._upstream is None:
            self._upstream = upstream_client()
        return self._upstream

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes(self))

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Start the manager with the server (reconciling what a previous run left)."""
        assert self.manager is not None
        await self.manager.start()
        register_manager(self.manager)
        self.manager_ready = True
        if self.multi_user and self.serverapp is not None:
            _remember_request_user(self.serverapp.identity_provider)
        if self.kernel_access and self.manager.store is not None:
            await self._open_kernel_access(self.manager, self.manager.store.token_secret)
        self._watcher = asyncio.ensure_future(self._follow_sessions())

    async def _open_kernel_access(self, manager: BaiSessionManager, secret: str) -> None:
        addresses = await manager.host_addresses()
        if not addresses or self.serverapp is None:
            return

        def lookup_tx(tx: Transaction, session_id: str) -> tuple[Session | None, int | None]:
            revoked = tx.get_meta(revoked_key(session_id))
            return tx.get_session(session_id), None if revoked is None else int(revoked)

        async def lookup(session_id: str) -> tuple[Session | None, int | None]:
            return await manager._query(lambda tx: lookup_tx(tx, session_id))

        def is_child_tx(tx: Transaction, key: str, owner: str, parent: str) -> bool:
            session = tx.get_session(key, owner)
            return session is not None and tx.get_meta(child_key(session.id)) == parent

        async def is_child(key: str, owner: str, parent: str) -> bool:
            return await manager._query(lambda tx: is_child_tx(tx, key, owner, parent))

        access = KernelAccess(secret, lookup, is_child, lambda: self.kernel_tokens_create_sessions)
        access.start(
            addresses.values(),
            self.serverapp.web_app.settings,
            api_routes(),
            {"name": self.name},  # what ExtensionApp gives its own handlers
            self.serverapp.port,
        )
        self.access = access
        # Links shown to people (%bai ports) use the public URL: the listener is the kernels'.
        public = {"BAI_JUPYTER_PUBLIC_URL": self.public_base_url()}
        manager.kernel_env_hook = lambda session_id, agent_id: {
            **access.environ(session_id, addresses.get(agent_id)),
            **public,
        }
        # The host firewall lets kernels reach these listeners and no other host port.
        await manager.allow_host_ports(access.ports())
        for address, url in access.urls.items():
            self.log.info("bai-jupyter: kernels reach the API at %s (%s)", url, address)

    def public_base_url(self) -> str:
        """Where people reach this server: ``public_url``, the environment, or its own URL."""
        url = self.public_url or os.environ.get("BAI_JUPYTER_PUBLIC_URL", "")
        if not url and self.serverapp is not None:
            url = self.serverapp.connection_url
        return url if url.endswith("/") else url + "/"

    async def _follow_sessions(self) -> None:
        """Keep the proxy's lookup fresh; a session leaving RUNNING takes its kernel client."""
        assert self.manager is not None
        async for event in self.manager.events():
            self.running.forget(event["session_id"])
            if event["status"] != Status.RUNNING.value:
                self.runs.forget(event["session_id"])

    async def stop_extension(self) -> None:
        """End kernel-backed sessions with their kernels, then stop the manager cleanly.

        Jupyter shuts its kernels down only after the extensions stopped, when the
        manager could no longer remove their containers: so do it first. Every step
        is guarded: one that fails (``shutdown_all`` raises 404 for a kernel whose
        launch failed) is logged and the rest still run, so the server always exits.
        """
        if self.manager is None:
            return
        kernels = getattr(self.serverapp, "kernel_manager", None)
        manager = self.manager

        async def shutdown_kernels() -> None:
            if kernels is not None:
                await ensure_async(kernels.shutdown_all())

        def close_streams() -> None:
            for stream in self.streams:
                end_stream(stream)
            if self._watcher is not None:
                self._watcher.cancel()

        def close_clients() -> None:
            if self._upstream is not None:
                self._upstream.close()
            if self.access is not None:
                self.access.stop()

        steps: list[tuple[str, Callable[[], Any]]] = [
            ("shutting kernels down", shutdown_kernels),
            ("ending event streams", close_streams),
            ("closing kernel clients", self.runs.close),
            ("closing the proxy client and kernel access", close_clients),
            ("unregistering the manager", lambda: unregister_manager(manager)),
            ("stopping the manager", manager.stop),
        ]
        for what, step in steps:
            try:
                result = step()
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                # A kernel whose launch failed is "not found" (404) here: expected, no traceback.
                self.log.warning(
                    "bai-jupyter: %s failed while stopping (%s); going on",
                    what,
                    exc,
                    exc_info=not isinstance(exc, web.HTTPError),
                )
