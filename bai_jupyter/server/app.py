"""The ``bai_jupyter`` Jupyter server extension: owns the session manager, serves the API.

The manager is configured through its own traits (``c.BaiSessionManager.store_url``,
``.agents``, ``.resource_groups``, ``.default_image`` …, also ``--BaiSessionManager.x``
on the command line): it is made with this app as its parent, so the server's
config reaches it, and the CLI reads the very same settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from jupyter_server.auth.identity import IdentityProvider, User
from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import ensure_async
from tornado import web
from traitlets import Unicode

from ..agents.base import AgentBackend
from ..agents.docker import DockerAgent
from ..agents.local import LocalAgent
from ..api import SessionsAPI
from ..client import RemoteManager
from ..errors import BaiError
from ..manager import BaiSessionManager
from ..registry import (
    expect_manager,
    register_manager,
    register_remote,
    request_user,
    unregister_manager,
)
from .host import NAME, ApiHost, ManagerStartFailed, Step
from .launches import LaunchErrorFilter, shut_down_kernels
from .routes import routes

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


class BaiJupyterApp(ExtensionApp, ApiHost):
    """Backend.AI-style compute sessions in this Jupyter server."""

    name = NAME
    load_other_extensions = True
    classes = [BaiSessionManager, AgentBackend, DockerAgent, LocalAgent]  # noqa: RUF012

    manager_url = Unicode(
        config=True,
        help="URL of a shared manager service (`bai-jupyter manager`, e.g. a JupyterHub "
        "service's http://127.0.0.1:8890/services/bai-jupyter/). Set: this server owns no "
        "manager; its API, proxy and kernels go through that service, as this server's "
        "user. Default: the BAI_JUPYTER_MANAGER_URL environment variable; empty: a manager "
        "of its own.",
    )
    manager_token = Unicode(
        config=True,
        help="Token this server calls the manager service with. Default: "
        "BAI_JUPYTER_MANAGER_TOKEN, else this single-user server's JupyterHub token "
        "(JUPYTERHUB_API_TOKEN), which must carry access:services!service=<its name>.",
    )

    def _manager_url_default(self) -> str:
        return os.environ.get("BAI_JUPYTER_MANAGER_URL", "")

    def _manager_token_default(self) -> str:
        return os.environ.get("BAI_JUPYTER_MANAGER_TOKEN") or os.environ.get(
            "JUPYTERHUB_API_TOKEN", ""
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

    def initialize_settings(self) -> None:
        if self.serverapp is not None:
            self._filter_launch_errors()
            self._stop_on_sigint()
        self.init_host()
        self.remote: RemoteManager | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        if self.manager_url:
            self.remote = RemoteManager(self.manager_url, self.manager_token)
            self.remote.remedy = (
                "the manager service may be restarting: retry in a few seconds; if it lasts, "
                "check that it runs there (BaiJupyterApp.manager_url, BAI_JUPYTER_MANAGER_URL)"
            )
            self.log.info(
                "bai-jupyter: sessions come from the manager service at %s", self.manager_url
            )
            return
        self.manager = BaiSessionManager(parent=self, log=self.log)
        expect_manager()  # kernels launched before it has started wait for it
        root = self.notebook_dir
        if root is None and self.serverapp is not None:
            root = self.serverapp.root_dir
        self.manager.notebook_root = str(Path(root).expanduser().absolute()) if root else None

    def _filter_launch_errors(self) -> None:
        """Failed bai launches: one warning line, no traceback. On the server's logger and
        on its handlers: Jupyter's restarter fails through tornado's logger, whose records
        reach the handlers but not the server logger's own filters."""
        assert self.serverapp is not None
        log = self.serverapp.log
        launch_errors = LaunchErrorFilter()
        log.addFilter(launch_errors)
        for handler in getattr(log, "handlers", ()):
            handler.addFilter(launch_errors)

    def _stop_on_sigint(self) -> None:
        """SIGINT stops the server cleanly (its kernels' sessions end) also without a terminal.

        jupyter_server handles SIGINT only when stdin is a terminal (to ask "Shut down?");
        otherwise Python's KeyboardInterrupt leaves its loop without any clean-up, and
        every bai session of its kernels keeps running. JupyterHub stops single-user
        servers with SIGINT and no terminal: treat it as SIGTERM.
        """
        assert self.serverapp is not None
        if threading.current_thread() is not threading.main_thread():
            return  # an embedding host's business (signals can be set only there)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, self.serverapp._signal_stop)

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes(self))

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Start the manager with the server (reconciling what a previous run left)."""
        if self.multi_user:
            _remember_request_user(serverapp.identity_provider)
        if self.remote is not None:
            server = uuid.uuid4().hex
            register_remote(self.remote, server)  # for this server's kernel provisioner
            self._heartbeat = asyncio.ensure_future(self._beat(self.remote, server))
            return
        assert self.manager is not None
        try:
            await self.start_manager(serverapp.web_app.settings, serverapp.port)
        except ManagerStartFailed:
            # Logged in one line; the server stays up and its API answers 503 with why.
            expect_manager(False)  # launches fall back to a manager of their own
            return
        except BaseException:
            expect_manager(False)
            raise
        register_manager(self.manager)

    async def _beat(self, remote: RemoteManager, server: str) -> None:
        """Tell the manager service this server is alive, as often as it asks: it ends the
        sessions of this server's kernels once this server is silent (killed, crashed)."""
        every = 10.0
        while True:
            try:
                every = wait = await remote.server_alive(server)
            except BaiError as exc:  # the service is (re)starting: tell it again soon
                self.log.debug("bai-jupyter: heartbeat to the manager service: %s", exc)
                wait = min(every, 2.0)
            await asyncio.sleep(max(0.5, min(wait, 60.0)))

    async def _stop_heartbeat(self) -> None:
        task, self._heartbeat = self._heartbeat, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def sessions_api(
        self,
        owner: str,
        is_admin: Callable[[str], Awaitable[bool]],
        parent: str | None,
        groups: Sequence[str] | None = None,
    ) -> SessionsAPI:
        if self.remote is not None:
            return self.remote  # the service knows this server's user from its token
        return super().sessions_api(owner, is_admin, parent, groups)

    def own_url(self) -> str:
        return str(self.serverapp.connection_url) if self.serverapp is not None else "/"

    async def stop_extension(self) -> None:
        """End kernel-backed sessions with their kernels, then stop the manager cleanly.

        Jupyter shuts its kernels down only after the extensions stopped, when the
        manager could no longer remove their containers: so do it first, each kernel to
        its end (a failed launch's leftover is forgotten, see ``launches``). Every step
        is guarded: one that fails is logged and the rest still run, so the server
        always exits.
        """
        kernels = getattr(self.serverapp, "kernel_manager", None)
        manager = self.manager

        async def shutdown_kernels() -> None:
            if kernels is not None:
                await shut_down_kernels(kernels, self.log)

        steps: list[Step] = [("shutting kernels down", shutdown_kernels), *self.stop_steps()]
        if manager is not None:
            steps.insert(-1, ("unregistering the manager", lambda: unregister_manager(manager)))
        else:
            steps.append(("stopping the heartbeat", self._stop_heartbeat))
            steps.append(("forgetting the manager service", lambda: register_remote(None)))
        await self.run_steps(steps)
