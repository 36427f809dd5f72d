"""What serves the REST API's handlers, in a Jupyter server or in the manager service.

One implementation for both deployment shapes: the server extension
(``server.app.BaiJupyterApp``) and the standalone manager service
(``service.app.ManagerService``) are each an :class:`ApiHost`. It gives every
request the caller's :class:`~bai_jupyter.api.SessionsAPI` (a manager of its own,
or a remote one), keeps the execute API's kernel clients, the proxy's cache and
client and the open event streams, and opens kernel access for a manager it owns.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from jupyter_server.utils import url_path_join
from tornado import web
from traitlets import Bool, Float, Instance, Int, Unicode
from traitlets.config import LoggingConfigurable

from ..api import SessionsAPI
from ..endpoints import Router
from ..errors import BaiError, Unavailable
from ..manager import BaiSessionManager, ScopedManager
from ..model import Status
from ..request.kernel_launch import ended_text
from .activity import ActivityNotes
from .attach import attach_name, remove_attach
from .events import end_stream
from .kernel_access import KernelAccess
from .kernel_runs import KernelRuns
from .redact import log_request
from .routes import api_routes
from .running import RunningSessions
from .upstream import KeepAliveClient

__all__ = ["NAME", "ApiHost", "ManagerStartFailed", "Step"]

#: The extension's name: the key its handlers find their host under in tornado's settings.
NAME = "bai_jupyter"

#: One step of stopping: what it does (for the log) and the call.
Step = tuple[str, Callable[[], Any]]


class ManagerStartFailed(Exception):
    """The manager this host owns could not start; the reason is logged (one line) and
    every API call is answered 503 with it."""


class ApiHost(LoggingConfigurable):
    """The settings and state the REST handlers use (see ``server.base.Extension``)."""

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
    proxy_csp = Unicode(
        "sandbox allow-scripts allow-forms allow-popups allow-popups-to-escape-sandbox "
        "allow-modals allow-downloads",
        config=True,
        help="Content-Security-Policy added (last) to every reply of the service proxy. The "
        "default sandbox without allow-same-origin runs a service's page in an origin of "
        "its own, so its script cannot read Jupyter's cookies or call Jupyter's API as the "
        "user who opened it (an admin too). The price: the page has no cookies or storage "
        "of its own, and a browser that keeps cookies SameSite=Lax by default (Chromium) "
        "sends it no login cookie for its scripts, styles and XHR, so a service of more "
        "than one self-contained page breaks. Empty: no policy of ours (the page runs on "
        "Jupyter's origin; only for services whose pages you trust like Jupyter itself).",
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
        help="The URL people open (e.g. behind a proxy), for the links %bai prints in "
        "kernels. Empty: the BAI_JUPYTER_PUBLIC_URL environment variable, else this "
        "server's own URL.",
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
    activity_interval = Float(
        5.0,
        config=True,
        help="Seconds between the notes of a session's use this server sends the manager "
        "(execute calls, proxied requests, and every this often while a proxied connection "
        "stays open), for its idle_timeout; keep idle timeouts well above it.",
    )
    manager = Instance(BaiSessionManager, allow_none=True, help="The manager this host owns.")

    def init_host(self) -> None:
        """The state handlers share (call once, before serving)."""
        self.runs = KernelRuns(
            self.execute_chunk_timeout, self.kernel_connect_timeout, self.execute_run_ttl, self.log
        )
        self.running = RunningSessions()
        self.activity = ActivityNotes(self.activity_interval, self.log)
        self.streams: set[asyncio.Queue[Any]] = set()
        self._upstream: KeepAliveClient | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.access: KernelAccess | None = None
        #: Attach kernelspecs removed as their session ended: name → what a launch on it gets.
        self.ended_attach: dict[str, str] = {}
        #: Why the manager this host owns could not start (None: it started, or has not yet).
        self.start_error: str | None = None

    def upstream(self) -> KeepAliveClient:
        """The proxy's connections to the services (made on first use, on the server's loop)."""
        if self._upstream is None:
            self._upstream = KeepAliveClient()
        return self._upstream

    def endpoint_router(self) -> Router | None:
        """The endpoints' routes, where this host runs the manager (else None)."""
        return self.manager.replicas.router if self.manager is not None else None

    def sessions_api(
        self,
        owner: str,
        is_admin: Callable[[str], Awaitable[bool]],
        parent: str | None,
        groups: Sequence[str] | None = None,
    ) -> SessionsAPI:
        """The door a handler's caller gets to the manager: their own sessions and templates
        (everyone's sessions for an admin); ``parent``: the caller's kernel-token session;
        ``groups``: their user groups where their authentication says (a Hub's)."""
        if self.manager is None or not self.manager.started:
            if self.start_error is not None:
                raise Unavailable(f"the session manager could not start: {self.start_error}")
            raise Unavailable("the session manager is not started")
        return ScopedManager(self.manager, owner, is_admin, parent, groups=groups)

    def own_url(self) -> str:
        """This host's own URL (where it listens), for links when nothing else is set."""
        return "/"

    def public_base_url(self) -> str:
        """Where people reach this host: ``public_url``, the environment, or its own URL."""
        url = self.public_url or os.environ.get("BAI_JUPYTER_PUBLIC_URL", "") or self.own_url()
        return url if url.endswith("/") else url + "/"

    def app_settings(self, base_url: str) -> dict[str, Any]:
        """What jupyter_server's handlers need of a tornado app's settings, where no Jupyter
        server makes the app (the manager service, an embedded manager's kernel access);
        the caller adds who authenticates and authorizes."""
        return {
            "base_url": base_url,
            "allow_remote_access": True,
            "allow_unauthenticated_access": False,
            "cookie_secret": secrets.token_bytes(32),
            "login_url": url_path_join(base_url, "login"),
            "headers": {},
            "xsrf_cookies": True,
            "disable_check_xsrf": False,
            "local_hostnames": ["localhost"],
            "log_function": log_request,  # tornado's writes ?token= values
            NAME: self,
        }

    async def start_manager(self, settings: Mapping[str, Any], port: int) -> None:
        """Start the manager this host owns, then kernel access with ``settings`` (those of
        the app serving the API) on ``port`` where it is free, and follow its sessions."""
        manager = self.manager
        assert manager is not None
        try:
            await manager.start()
        except Exception as exc:
            # A bad setting (ConfigError names it) or an unreachable store or engine: one
            # line in the log, and the API says the same in its 503s.
            reason = exc.message if isinstance(exc, BaiError) else f"{type(exc).__name__}: {exc}"
            self.start_error = " ".join(reason.split()) or type(exc).__name__
            self.log.error("bai-jupyter: the session manager could not start: %s", self.start_error)
            self.log.debug("bai-jupyter: the manager's start failed", exc_info=True)
            raise ManagerStartFailed(self.start_error) from exc
        if self.kernel_access:
            await self._open_kernel_access(manager, settings, port)
        self._watcher = asyncio.ensure_future(self._follow_sessions(manager))

    async def _open_kernel_access(
        self, manager: BaiSessionManager, settings: Mapping[str, Any], port: int
    ) -> None:
        addresses = await manager.host_addresses()
        if not addresses:
            return
        access = KernelAccess(manager.kernel_tokens, lambda: self.kernel_tokens_create_sessions)
        access.start(addresses.values(), dict(settings), api_routes(), {"name": NAME}, port)
        self.access = access
        # Links shown to people (%bai ports) use the public URL: the listener is the kernels'.
        public = {"BAI_JUPYTER_PUBLIC_URL": self.public_base_url()}
        manager.kernel_env_hook = lambda session_id, agent_id: {
            **access.environ(session_id, addresses.get(agent_id)),
            **public,
        }
        # The host firewall lets kernels reach these listeners and no other host port.
        await manager.allow_host_ports(access.listeners())
        for address, url in access.urls.items():
            self.log.info("bai-jupyter: kernels reach the API at %s (%s)", url, address)

    async def _follow_sessions(self, manager: BaiSessionManager) -> None:
        """Keep the proxy's lookup fresh; a session leaving RUNNING takes its kernel client,
        and one that ended its attach kernelspec (JupyterLab's launcher drops the card)."""
        async for event in manager.events():
            self.running.forget(event["session_id"])
            if event["status"] != Status.RUNNING.value:
                self.runs.forget(event["session_id"])
            if Status(event["status"]).is_terminal:
                await self._forget_attach(event)

    async def _forget_attach(self, event: Mapping[str, Any]) -> None:
        """Remove an ended session's attach kernelspec, remembering what a launch on it (a
        launcher card not yet dropped) is answered."""
        session_id = event["session_id"]
        name = attach_name(session_id)
        why = event.get("status_info") or event["status"]
        # Said first: a launch while the file goes is told why (the provisioner says the
        # same while the file is there), never Jupyter's "kernel is not available".
        self.ended_attach[name] = ended_text(event.get("name") or session_id, why)
        try:
            removed = await asyncio.to_thread(remove_attach, session_id)
        except Exception as exc:  # a data dir that cannot be read must not stop the follower
            self.log.warning(
                "bai-jupyter: kernelspec of session %s not removed: %s", session_id, exc
            )
            removed = False
        if not removed:
            self.ended_attach.pop(name, None)  # none was there: nothing to explain
            return
        self.log.info("bai-jupyter: session %s ended; its kernelspec is removed", session_id)

    def stop_steps(self) -> list[Step]:
        """Ending streams and clients, then the manager this host owns."""

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

        steps: list[Step] = [
            ("ending event streams", close_streams),
            ("ending activity notes", self.activity.close),
            ("closing kernel clients", self.runs.close),
            ("closing the proxy client and kernel access", close_clients),
        ]
        if self.manager is not None:
            steps.append(("stopping the manager", self.manager.stop))
        return steps

    async def run_steps(self, steps: list[Step]) -> None:
        """Run every step; one that fails is logged and the rest still run (stopping must
        always complete)."""
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
