"""``POST /bai/api/v1/sessions/{key}/kernelspec``: open notebooks on a session that exists.

JupyterLab starts kernels by kernelspec name only, so attaching a notebook to a
session made elsewhere (the new-session dialog, the API) needs a kernelspec of its
own: ``bai-session-<id[:12]>``, whose provisioner config names the session. It is
written in this server's Jupyter data directory and removed when its session ends
(:func:`remove_attach`, called as the host follows the sessions' events, so
JupyterLab's launcher drops its card); whatever is left of sessions that ended while
no server followed them is removed whenever another one is written.
"""

from __future__ import annotations

import asyncio
import contextlib

from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from jupyter_server.auth.decorator import authorized
from tornado import web

from ..errors import Conflict, InvalidRequest, NotFound
from ..kernelspecs import install, installed, kernelspec_json
from ..model import SessionType, Status
from .base import BaiHandler

__all__ = ["AttachKernelspecHandler", "attach_name", "remove_attach"]

PREFIX = "bai-session-"


def attach_name(session_id: str) -> str:
    """The kernelspec name that attaches to ``session_id``."""
    return PREFIX + session_id[:12]


def remove_attach(session_id: str) -> bool:
    """Remove the kernelspec attaching to ``session_id`` (it ended), if this host wrote one.

    Blocking (files): call it in a thread. Only a kernelspec of that name whose config
    names this very session goes (a 12-character prefix could name another one).
    """
    name = attach_name(session_id)
    for entry in installed():
        if entry.name == name and entry.config.get("session") == session_id:
            with contextlib.suppress(NoSuchKernel, OSError):
                KernelSpecManager().remove_kernel_spec(name)
                return True
    return False


class AttachKernelspecHandler(BaiHandler):
    """Write the kernelspec attaching kernels to an interactive session; ``{"name"}``."""

    @web.authenticated
    @authorized
    async def post(self, key: str) -> None:
        session = await self.api.get(key)
        if session.spec.type is not SessionType.INTERACTIVE:
            raise InvalidRequest(
                f"session {session.id} is a {session.spec.type.value} session; "
                "only interactive ones run a notebook's kernel"
            )
        if session.status.is_terminal or session.status is Status.TERMINATING:
            raise Conflict(f"session {session.id} has ended ({session.status.value})")
        await self._sweep()
        name = attach_name(session.id)
        label = session.name or session.id[:8]
        spec = kernelspec_json(f"Python 3 · bai session {label}", {"session": session.id})
        await asyncio.to_thread(install, name, spec, True)
        self.write_json({"name": name, "session_id": session.id}, status=201)

    async def _sweep(self) -> None:
        """Remove the attach kernelspecs of the caller's sessions that have ended."""
        for entry in await asyncio.to_thread(installed):
            target = entry.config.get("session")
            if not entry.name.startswith(PREFIX) or not isinstance(target, str):
                continue
            try:
                ended = (await self.api.get(target)).status.is_terminal
            except NotFound:
                continue  # another user's (on a shared server), or purged: not ours to judge
            if ended:
                with contextlib.suppress(NoSuchKernel, OSError):
                    await asyncio.to_thread(KernelSpecManager().remove_kernel_spec, entry.name)
