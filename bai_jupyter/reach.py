"""How a kernel provisioner reaches a manager: in this process, over HTTP, or embedded.

In this order: the manager a bai server extension registered in this process
(or the manager service it uses, in a JupyterHub); the REST API at
``BAI_JUPYTER_URL``; else one embedded in this process on the
shared default store, on an event-loop thread of its own, whose scheduling loop
and engine watcher keep running whatever the caller's loop does (``run_sync``
front ends such as ``jupyter console`` and nbclient run theirs only while they
wait). Every path gives the same :class:`~bai_jupyter.api.SessionsAPI`. The
embedded manager also serves its kernels' API (``server.embedded``), so ``%bai``
works in them as under a server.

A session a kernel of this process launched on the embedded manager ends with
the process (``user-requested``) unless the kernel's shutdown ended it first:
``jupyter console``'s exit asks main1's ipykernel to quit over ZMQ and exits at
once, before that manager could see main1 go and end its session.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import TYPE_CHECKING

from traitlets.config import Config

from .api import SessionsAPI
from .errors import BaiError, Unavailable
from .loop_thread import LoopThread
from .registry import (
    current_manager,
    current_remote,
    kernel_owner,
    local_owner,
    manager_started,
    remote_server,
)

if TYPE_CHECKING:  # imported when first needed: the remote path never loads it
    from .manager import BaiSessionManager

__all__ = ["find_sessions", "hold_with_process", "launched_by", "stop_embedded_manager"]

#: How long a launch waits for the manager this process's server extension is starting.
_REGISTRATION_WAIT = 120.0
#: How long the process's exit waits for the embedded manager to finish its work.
_EMBEDDED_STOP_TIMEOUT = 30.0


class _Embedded:
    """This process's own manager, started on a loop thread of its own, with its kernels'
    API (``server.embedded``: ``%bai`` in those kernels needs no server)."""

    def __init__(self, config: Config) -> None:
        from .manager import BaiSessionManager
        from .server.embedded import EmbeddedHost

        self.thread = LoopThread("bai-jupyter-embedded-manager")
        self.host = EmbeddedHost(config=config)
        self.manager: BaiSessionManager = BaiSessionManager(parent=self.host)
        self.host.manager = self.manager
        self.started = self.thread.submit(self.host.start())
        #: Sessions this process's kernels launched here and still hold: ended at exit.
        self.held: set[str] = set()

    def stop(self) -> None:
        """End the sessions still held, stop the kernels' API and the manager (others keep
        running), then the loop."""
        if self.started.done() and self.started.exception() is None:
            self.thread.submit(self._end_held()).result(_EMBEDDED_STOP_TIMEOUT)
            self.thread.submit(self.host.stop()).result(_EMBEDDED_STOP_TIMEOUT)
        self.thread.stop(_EMBEDDED_STOP_TIMEOUT)

    async def _end_held(self) -> None:
        async def end(key: str) -> None:
            try:
                if not (await self.manager.get(key)).status.is_terminal:
                    await self.manager.destroy(key, reason="user-requested")
            except BaiError:
                pass  # ended, or purged, meanwhile

        keys, self.held = list(self.held), set()
        await asyncio.gather(*(end(key) for key in keys))


_embedded: _Embedded | None = None
_embedded_lock = threading.Lock()


async def _embedded_sessions(config: Config, owner: str) -> SessionsAPI:
    from .manager import ScopedManager

    global _embedded
    with _embedded_lock:
        if _embedded is None:
            _embedded = _Embedded(config)
            # Stopped before the interpreter shuts worker threads down, through the private
            # threading._register_atexit: no public hook runs early enough. concurrent.futures
            # registers its own shutdown there, after which asyncio.to_thread (every store
            # and engine call of manager.stop) raises "cannot schedule new futures after
            # shutdown"; atexit.register, and a non-daemon thread that joins the main thread,
            # both run after it (checked on CPython 3.11). Registered after that hook
            # (imported with .loop_thread above), so it runs before it.
            threading._register_atexit(stop_embedded_manager)  # type: ignore[attr-defined]
        embedded = _embedded
    try:
        await asyncio.wrap_future(embedded.started)
    except Exception as failed:
        exc = failed.__cause__ or failed  # ManagerStartFailed: its cause says why
        # Dropped, so that the next launch tries again (e.g. once the store is fixed).
        await asyncio.to_thread(stop_embedded_manager, embedded)
        if isinstance(exc, BaiError):
            raise exc from None
        raise Unavailable(f"the embedded bai-jupyter session manager did not start: {exc}") from exc
    return ScopedManager(embedded.manager, owner, thread=embedded.thread)


def stop_embedded_manager(only: _Embedded | None = None) -> None:
    """Stop this process's embedded manager, if one runs (at exit, or when it failed to start).

    With ``only``, just that one: a newer manager another launch made meanwhile stays.
    """
    global _embedded
    with _embedded_lock:
        if only is not None and _embedded is not only:
            return  # already dropped, and stopped, by the launch that replaced it
        embedded, _embedded = _embedded, None
    if embedded is not None:
        embedded.stop()


def hold_with_process(sessions: SessionsAPI, key: str) -> None:
    """``key`` was launched by a kernel of this process: on the embedded manager, it ends
    when the process exits (one its kernel's shutdown ended already is left as it is)."""
    embedded = _embedded
    if embedded is not None and getattr(sessions, "manager", None) is embedded.manager:
        embedded.held.add(key)


def launched_by(sessions: SessionsAPI) -> dict[str, str]:
    """The meta naming this process's server in remote mode, for a session its kernel
    launches through the manager service: the service ends it should the server go
    (``jupyter_server``, see the manager's ``server_gone_timeout``)."""
    server = remote_server()
    return {"jupyter_server": server} if server and sessions is current_remote() else {}


async def find_sessions(config: Config) -> tuple[SessionsAPI, str]:
    """The manager to use and a word for the log: in-process, remote, or embedded."""
    from .manager import ScopedManager

    await manager_started(_REGISTRATION_WAIT)  # this server's, when it is starting one
    manager = current_manager()
    if manager is not None:
        return ScopedManager(manager, kernel_owner()), "the server's own manager"
    remote = current_remote()
    if remote is not None:
        return remote, "the manager service this server uses"
    url = os.environ.get("BAI_JUPYTER_URL")
    if url:
        from .client import RemoteManager

        return RemoteManager.from_env(), f"the bai-jupyter server at {url}"
    return await _embedded_sessions(config, local_owner()), "a manager embedded in this process"
