"""The session manager of this process, for in-process front ends.

The server extension registers the manager it owns; the kernel provisioner
looks here first so that, inside a Jupyter server, it calls the manager
directly instead of going over HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import getpass
import os
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .api import SessionsAPI
    from .manager import BaiSessionManager

__all__ = [
    "current_manager",
    "current_remote",
    "expect_manager",
    "kernel_owner",
    "local_owner",
    "manager_started",
    "register_manager",
    "register_remote",
    "remote_server",
    "request_user",
    "unregister_manager",
]

#: The Jupyter user of the request being served (set by a multi-user server extension):
#: kernels started by that request (``POST /api/kernels``, ``/api/sessions``) are theirs.
request_user: ContextVar[str | None] = ContextVar("bai_jupyter_request_user", default=None)

_current: BaiSessionManager | None = None
_remote: SessionsAPI | None = None
_server = ""
#: Set while a server extension of this process is starting its manager; cleared once
#: it is registered (or will not be).
_starting: asyncio.Event | None = None


def expect_manager(expected: bool = True) -> None:
    """Say that a manager of this process is on its way (or, ``False``, that it is not):
    a kernel launched meanwhile waits for it instead of starting one of its own."""
    global _starting
    if expected:
        _starting = _starting or asyncio.Event()
    elif _starting is not None:
        _starting.set()
        _starting = None


async def manager_started(timeout: float) -> None:
    """Wait (at most ``timeout`` s) for the manager this process is starting, if any."""
    starting = _starting
    if starting is not None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(starting.wait(), timeout)


def register_manager(manager: BaiSessionManager) -> None:
    """Make ``manager`` the one in-process front ends use."""
    global _current
    _current = manager
    expect_manager(False)


def unregister_manager(manager: BaiSessionManager) -> None:
    """Forget ``manager`` if it is the registered one (on stop)."""
    global _current
    if _current is manager:
        _current = None


def current_manager() -> BaiSessionManager | None:
    """The registered manager, or ``None`` when no server extension runs here."""
    return _current


def register_remote(api: SessionsAPI | None, server: str = "") -> None:
    """Make ``api`` (a manager service's, over HTTP) the one in-process front ends use;
    ``None`` forgets it. A server that owns no manager of its own registers this, with
    its own id (``server``): the sessions its kernels launch carry it, so that the
    manager ends them should the server go without shutting them down."""
    global _remote, _server
    _remote, _server = api, server
    expect_manager(False)


def remote_server() -> str:
    """The id of this process's server in remote mode (``""``: none)."""
    return _server


def current_remote() -> SessionsAPI | None:
    """The registered manager service, or ``None``."""
    return _remote


def local_owner() -> str:
    """Whom this process acts for: the JupyterHub user it serves, else the OS user.

    A single-user Jupyter server has one owner whoever holds its token, so the
    provisioner, the REST API and the magics all file sessions under this name.
    """
    return os.environ.get("JUPYTERHUB_USER") or _os_user()


@functools.cache
def _os_user() -> str:
    """The OS user, read once: ``getpass`` reads the password database where no variable
    names it (a container), and the proxy asks on every request."""
    return getpass.getuser()


def kernel_owner() -> str:
    """Whom a kernel being started belongs to: the requesting Jupyter user, or local_owner()."""
    return request_user.get() or local_owner()
