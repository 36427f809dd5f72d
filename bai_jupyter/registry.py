"""The session manager of this process, for in-process front ends.

The server extension registers the manager it owns; the kernel provisioner
looks here first so that, inside a Jupyter server, it calls the manager
directly instead of going over HTTP.
"""

from __future__ import annotations

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
    "kernel_owner",
    "local_owner",
    "register_manager",
    "register_remote",
    "request_user",
    "unregister_manager",
]

#: The Jupyter user of the request being served (set by a multi-user server extension):
#: kernels started by that request (``POST /api/kernels``, ``/api/sessions``) are theirs.
request_user: ContextVar[str | None] = ContextVar("bai_jupyter_request_user", default=None)

_current: BaiSessionManager | None = None
_remote: SessionsAPI | None = None


def register_manager(manager: BaiSessionManager) -> None:
    """Make ``manager`` the one in-process front ends use."""
    global _current
    _current = manager


def unregister_manager(manager: BaiSessionManager) -> None:
    """Forget ``manager`` if it is the registered one (on stop)."""
    global _current
    if _current is manager:
        _current = None


def current_manager() -> BaiSessionManager | None:
    """The registered manager, or ``None`` when no server extension runs here."""
    return _current


def register_remote(api: SessionsAPI | None) -> None:
    """Make ``api`` (a manager service's, over HTTP) the one in-process front ends use;
    ``None`` forgets it. A server that owns no manager of its own registers this."""
    global _remote
    _remote = api


def current_remote() -> SessionsAPI | None:
    """The registered manager service, or ``None``."""
    return _remote


def local_owner() -> str:
    """Whom this process acts for: the JupyterHub user it serves, else the OS user.

    A single-user Jupyter server has one owner whoever holds its token, so the
    provisioner, the REST API and the magics all file sessions under this name.
    """
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


def kernel_owner() -> str:
    """Whom a kernel being started belongs to: the requesting Jupyter user, or local_owner()."""
    return request_user.get() or local_owner()
