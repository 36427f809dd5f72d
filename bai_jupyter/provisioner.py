"""The ``bai`` kernel provisioner: a notebook's Jupyter kernel is the ipykernel in ``main1``.

``launch_kernel`` enqueues an interactive session, waits (without blocking the
event loop, so jupyter_server's pending kernels work) until it is RUNNING, and
hands back the connection info of the ipykernel in ``main1``. Everything after
that is read from or sent to the session manager: ``poll``/``wait`` read the
session's state, interrupts and restarts are signals to main1's runtime.

A Jupyter restart (``shutdown_request`` with ``restart=True``, then a new
launch) keeps the session: the runtime restarts the ipykernel in the same
``main1`` on the same ports (SIGHUP), so the cluster, its sub kernels and their
files stay. Only a shutdown without restart destroys the session.

The manager is found by :func:`bai_jupyter.reach.find_sessions`: the one a bai
server extension registered in this process, the REST API at ``BAI_JUPYTER_URL``,
or one embedded in this process, so that ``jupyter console``, ``jupyter
execute``, nbclient and papermill work without a Jupyter server.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import PurePath
from typing import Any, cast

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
from tornado.web import HTTPError
from traitlets import Bool, Dict, Float, Int, List, Unicode

from .api import SessionsAPI
from .errors import BaiError, Timeout, Unavailable
from .kernel_end import ended_notice, exit_code, why_pending
from .model import ACTIVE, Session, SessionType, Status, ended_on_purpose
from .reach import find_sessions, hold_with_process, launched_by
from .request import RESERVED_PORTS_TEXT
from .request.kernel_launch import ended_error, launch_request

__all__ = ["BaiProvisioner", "LaunchError"]

#: The traits that are fields of the session request (the rest steer the launch).
_REQUEST_TRAITS = (
    "image",
    "cluster_size",
    "cluster_mode",
    "resource_group",
    "priority",
    "resources",
    "mounts",
    "env",
    "service_ports",
)
#: Lines of main1's log a failed launch or a dead kernel reports.
_LOG_LINES = 20


class LaunchError(HTTPError):
    """A kernel launch that cannot finish, and why.

    An :class:`~tornado.web.HTTPError` because jupyter_server shows the message of
    only those to the user (JupyterLab's "Error Starting Kernel" dialog); for any
    other exception it says "Unhandled error".
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message.replace("%", "%%"))


class BaiProvisioner(KernelProvisionerBase):
    """Runs a Jupyter kernel as ``main1`` of a bai-jupyter session (a cluster of kernels)."""

    image = Unicode(
        None, allow_none=True, config=True, help="Kernel image; default: the manager's."
    )
    cluster_size = Int(
        None, allow_none=True, config=True, help="Kernels in the session (main1, sub1 …), 1–64."
    )
    cluster_mode = Unicode(
        None,
        allow_none=True,
        config=True,
        help="'single-node' (all kernels on one agent) or 'multi-node'.",
    )
    resources = Dict(config=True, help='Per-kernel resource slots, e.g. {"cpu": "2", "mem": "4g"}.')
    mounts = List(
        Unicode(),
        config=True,
        help="Data folders mounted in every kernel: a name, or /host/path[:/target][:ro].",
    )
    env = Dict(
        value_trait=Unicode(), config=True, help="Extra environment variables of every kernel."
    )
    service_ports = List(
        Unicode(),
        config=True,
        help="Service ports of main1 as 'name:proto:port' (proto http, tcp or preopen; "
        f"{RESERVED_PORTS_TEXT} are reserved), proxied at /bai/sessions/<id>/proxy/<name>/.",
    )
    template = Unicode(
        None,
        allow_none=True,
        config=True,
        help="Session template whose fields the settings above override.",
    )
    resource_group = Unicode(
        None, allow_none=True, config=True, help="Resource group whose agents run the session."
    )
    priority = Int(
        None, allow_none=True, config=True, help="Scheduling priority 0–100, higher first."
    )
    launch_timeout = Float(
        300.0,
        config=True,
        help="Seconds a launch may wait for its session to be scheduled and started; "
        "then the session is cancelled and the launch fails saying why it waited.",
    )
    session = Unicode(
        None,
        allow_none=True,
        config=True,
        help="Attach to this running interactive session (id or name) instead of creating "
        "one; shutting the kernel down then restarts main1's ipykernel and keeps the session.",
    )

    mount_notebook_dir = Bool(
        True,
        config=True,
        help="Mount the notebooks' directory (BaiJupyterApp.notebook_dir, default the "
        "server's root_dir) read-write at /home/work/notebooks in every kernel and start "
        "the kernel in the notebook's own folder there, as a local kernel would. False: "
        "kernels start in an empty /home/work.",
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: The notebook's folder on the server's host (jupyter_client's ``cwd``), if any.
        self._cwd: str | None = None
        #: The notebook it runs for (jupyter_server's ``JPY_SESSION_NAME``), if any.
        self._notebook: str | None = None
        #: The session whose main1 runs this kernel; ``None`` before launch and after cleanup.
        self.session_id: str | None = None
        #: The ipykernel was stopped (killed, or asked to shut down); cleanup decides what next.
        self._released = False
        #: main1 was already told to restart its ipykernel in this restart.
        self._hupped = False
        self._sessions: SessionsAPI | None = None
        #: The ended session whose reason is already in the log (poll runs every few seconds).
        self._reported: str | None = None
        self._waiting: str | None = None  # the session a launch in progress waits for

    # --- the manager ------------------------------------------------------------------------

    async def _manager(self) -> SessionsAPI:
        if self._sessions is None:
            self._sessions, where = await find_sessions(self.config)
            self.log.info("bai kernel %s: sessions come from %s", self.kernel_id, where)
        return self._sessions

    # --- launch -----------------------------------------------------------------------------

    @property
    def has_process(self) -> bool:
        return self.session_id is not None

    def _request(self) -> dict[str, Any]:
        """The session request: only what is set, so a template or the defaults fill the rest."""
        return launch_request({name: getattr(self, name) for name in _REQUEST_TRAITS})

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Only the command is needed: the kernel's environment is its session's, not ours."""
        kwargs["cmd"] = list(self.kernel_spec.argv)
        cwd = kwargs.get("cwd")
        self._cwd = cwd if isinstance(cwd, str) and PurePath(cwd).is_absolute() else None
        self._notebook = (kwargs.get("env") or {}).get("JPY_SESSION_NAME")
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Create (or reuse, on restart) the session and wait until main1's ipykernel is up."""
        try:
            return await self._launch()
        except BaiError as exc:
            raise LaunchError(exc.status, f"bai kernel {self.kernel_id}: {exc.message}") from exc

    async def _launch(self) -> KernelConnectionInfo:
        sessions = await self._manager()
        if self.session_id is not None:
            current = await sessions.get(self.session_id, connection=True)
            if current.status in ACTIVE:
                self._released = self._hupped = False  # a restart in place
                return self._connection(current)
            if self.session:
                raise ended_error(current)
            self.session_id = None  # it ended (the kernel died): a restart gets a new session
        if self.session:
            session = await sessions.get(self.session)
            if session.spec.type is not SessionType.INTERACTIVE:
                raise Unavailable(
                    f"session {self.session} is a "
                    f"{session.spec.type.value} session; only interactive ones run a kernel"
                )
            if session.status.is_terminal or session.status is Status.TERMINATING:
                raise ended_error(session)  # a launcher card clicked before it went: no log tail
        else:
            meta: dict[str, Any] = {"jupyter_kernel_id": self.kernel_id, **launched_by(sessions)}
            if self.mount_notebook_dir and self._cwd:
                meta["notebook_dir"] = self._cwd  # mounted only under the manager's root
            if self._notebook:
                meta["notebook_path"] = self._notebook
            session = await sessions.create(self._request(), self.template, meta=meta)
            hold_with_process(sessions, session.id)
        self.session_id = session.id
        self._released = self._hupped = False
        self.log.info(
            "bai kernel %s: session %s is %s", self.kernel_id, session.id, session.status.value
        )
        self._waiting = session.id
        try:
            session = await sessions.wait_for(session.id, ACTIVE, timeout=self.launch_timeout)
        except Timeout:
            session = await self._give_up(sessions, "launch-timeout")
            raise Timeout(
                f"session {session.id} did not start within "
                f"launch_timeout={self.launch_timeout:g} s and was cancelled; it waited "
                f"because: {why_pending(session)}. Free resources (end other sessions), ask "
                f"for less, or raise launch_timeout."
            ) from None
        except asyncio.CancelledError:
            waited = await asyncio.shield(self._give_up(sessions, "launch-cancelled"))
            self.log.warning(
                "bai kernel %s: launch cancelled; session %s was cancelled (it waited because: %s)",
                self.kernel_id,
                waited.id,
                why_pending(waited),
            )
            raise
        finally:
            self._waiting = None
        if session.status not in ACTIVE:
            self.session_id = None
            why = await self._why_ended(sessions, session)
            self.log.warning("bai kernel %s: %s", self.kernel_id, why)
            raise Unavailable(f"session {session.id} ended before its kernel started: {why}")
        if "key" not in self._main_connection(session):  # the API hides keys unless asked
            session = await sessions.get(session.id, connection=True)
        return self._connection(session)

    async def _why_ended(self, sessions: SessionsAPI, session: Session) -> str:
        """Status, reason, error and the last lines of main1's log, for people to act on."""
        why = f"{session.status.value} ({session.status_info})"
        detail = str(session.status_data.get("error") or "")
        if not detail and not session.kernels:
            detail = why_pending(session)
        try:
            log = (await sessions.logs(session.id)).strip()
        except BaiError:
            log = ""
        tail = "\n".join(log.splitlines()[-_LOG_LINES:])
        if tail and tail not in detail:
            detail = f"{detail}\nmain1's last log lines:\n{tail}".strip()
        return f"{why}: {detail}" if detail else why

    async def _give_up(self, sessions: SessionsAPI, reason: str) -> Session:
        """Cancel the session of a launch that will not finish (attached ones are not ours)."""
        key, self.session_id = self.session_id, None
        assert key is not None
        if self.session:
            return await sessions.get(key)
        return await sessions.destroy(key, reason=reason)

    async def cancel_launch(self) -> None:
        """End the session a launch waits for (the server stops mid-restart), not attached ones."""
        key, self._waiting = self._waiting, None
        if key is not None and not self.session:
            try:
                await (await self._manager()).destroy(key, reason="launch-cancelled")
            except BaiError as exc:
                self.log.warning("bai kernel %s: launch not cancelled: %s", self.kernel_id, exc)

    @staticmethod
    def _main_connection(session: Session) -> dict[str, Any]:
        main = session.main if session.kernels else None
        connection = main.info.get("connection") if main is not None else None
        return connection if isinstance(connection, dict) else {}

    def _connection(self, session: Session) -> KernelConnectionInfo:
        connection = self._main_connection(session)
        if not connection:
            raise Unavailable(f"session {session.id} runs no ipykernel in main1")
        # Bytes, as jupyter_client holds it: a str key would not compare equal.
        info = cast(KernelConnectionInfo, {**connection, "key": connection["key"].encode()})
        self.connection_info = info
        return info

    # --- a running kernel -------------------------------------------------------------------

    async def poll(self) -> int | None:
        if self.session_id is None or self._released:
            return 0
        sessions = await self._manager()
        session = await sessions.get(self.session_id)
        code = exit_code(session)
        if code is None or self._reported == session.id:
            return code
        if ended_on_purpose(session.status, session.status_info):
            self._reported = session.id
            self._no_restart(ended_notice(session))
        elif code:  # Jupyter only says "the kernel died"
            self._reported = session.id
            why = await self._why_ended(sessions, session)
            self.log.warning("bai kernel %s: session %s ended: %s", self.kernel_id, session.id, why)
        return code

    def _no_restart(self, notice: str) -> None:
        """A session ended on purpose ends its kernel: Jupyter's restarter, which polls
        right after this, takes its "restart failed" path (no launch, no new session);
        the server drops the kernel and tells its clients it is dead."""
        self.log.warning("bai kernel %s: %s", self.kernel_id, notice)
        kernel = self.parent
        if kernel is not None and kernel.has_trait("reason"):
            kernel.reason = notice
        restarter = getattr(kernel, "_restarter", None)  # jupyter_client's, when autorestart
        if restarter is not None:
            restarter.restart_limit = 0

    async def wait(self) -> int | None:
        if self.session_id is None or self._released:
            return 0
        session = await (await self._manager()).wait_for(self.session_id, ())
        return exit_code(session)

    async def send_signal(self, signum: int) -> None:
        """Signals go to main1's runtime: SIGINT interrupts the ipykernel, SIGHUP restarts it."""
        if signum == 0 or self.session_id is None:
            return
        sessions = await self._manager()
        try:
            await sessions.signal(self.session_id, signum)
        except BaiError as exc:  # not running (any more), or unreachable: nothing to signal
            self.log.warning("bai kernel %s: signal %d not sent: %s", self.kernel_id, signum, exc)

    async def kill(self, restart: bool = False) -> None:
        """Mark the ipykernel stopped; :meth:`cleanup` (which is told reliably whether a
        restart follows) restarts it in place or destroys the session."""
        self._released = True

    async def terminate(self, restart: bool = False) -> None:
        self._released = True

    async def shutdown_requested(self, restart: bool = False) -> None:
        """The ipykernel was asked to shut down: restart it in place, or end the session."""
        self._released = True
        if restart or self.session:
            await self._restart_in_place()
        else:
            await self._destroy()

    async def cleanup(self, restart: bool = False) -> None:
        if restart:
            await self._restart_in_place()
            return
        if self.session:
            await self._restart_in_place()  # an attached session lives on with a fresh kernel
        else:
            await self._destroy()
        self.session_id = None
        self._released = self._hupped = False

    async def _restart_in_place(self) -> None:
        if self._hupped or self.session_id is None:
            return
        self._hupped = True
        await self.send_signal(signal.SIGHUP)

    async def _destroy(self) -> None:
        if self.session_id is None:
            return
        try:
            sessions = await self._manager()
            session = await sessions.get(self.session_id)
            if not session.status.is_terminal:
                await sessions.destroy(self.session_id, reason="user-requested")
        except BaiError as exc:  # e.g. the remote server is down: say so, never a 500
            self.log.warning(
                "bai kernel %s: session %s not destroyed: %s", self.kernel_id, self.session_id, exc
            )

    # --- persistence ------------------------------------------------------------------------

    async def get_provisioner_info(self) -> dict[str, Any]:
        info: dict[str, Any] = await super().get_provisioner_info()
        info["bai_session_id"] = self.session_id
        return info

    async def load_provisioner_info(self, provisioner_info: dict[str, Any]) -> None:
        await super().load_provisioner_info(provisioner_info)
        self.session_id = provisioner_info.get("bai_session_id")
        self._released = self._hupped = False
