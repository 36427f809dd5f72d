"""Kernel launches that cannot happen: clean 4xx answers and one-line log records.

A bai kernel's launch fails with :class:`~bai_jupyter.provisioner.LaunchError` (an
``HTTPError`` carrying the manager's 4xx, e.g. a request no agent can ever fit).
``POST /api/kernels`` passes it on (its own status: a 4xx, or 504 for a
``launch_timeout``), but jupyter_server's ``POST /api/sessions`` turns every exception
into a 500, and jupyter_client logs each failed launch with
its whole traceback twice: a user error then reads like a server crash.

A failed launch also stays behind in jupyter_client's table of pending kernels,
where ``shutdown_all`` finds it and raises 404 at the first one, cutting the
server's stop short (its loop never stops): :func:`shut_down_kernels` forgets
those first, ends the launch of a kernel Jupyter's restarter is bringing back
(its shutdown would raise at once, and its new session start after the manager
stopped), and shuts every kernel down whatever one of them raises.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.services.sessions.handlers import SessionRootHandler
from jupyter_server.utils import ensure_async
from tornado import web

from ..provisioner import BaiProvisioner, LaunchError

__all__ = ["LaunchErrorFilter", "SessionsLaunchHandler", "launch_error", "shut_down_kernels"]


def launch_error(exc: BaseException | None) -> LaunchError | None:
    """The launch error in ``exc``'s chain of causes, if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, LaunchError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


class SessionsLaunchHandler(SessionRootHandler):
    """jupyter_server's ``/api/sessions``, answering a failed bai launch with its own status."""

    # The server's own handler checks both too; marked here for the endpoint audit.
    @web.authenticated
    @authorized
    async def post(self) -> None:
        self._refuse_ended_attach()
        try:
            await ensure_async(super().post())
        except web.HTTPError as exc:
            cause = launch_error(exc)
            if exc.status_code == 500 and cause is not None:
                raise cause from None  # its own status: 4xx, or 504 for a launch_timeout
            raise

    def _refuse_ended_attach(self) -> None:
        """A notebook on the attach kernelspec of a session that ended (a launcher card
        JupyterLab has not dropped yet): one line saying so, not "kernel not available"."""
        host = self.settings.get("bai_jupyter")  # host.NAME (host imports this module's routes)
        ended: dict[str, str] = getattr(host, "ended_attach", {})
        model = self.get_json_body() or {}
        kernel = model.get("kernel") if isinstance(model, dict) else None
        name = kernel.get("name") if isinstance(kernel, dict) else None
        if not isinstance(name, str) or name not in ended:
            return
        if name in self.kernel_spec_manager.find_kernel_specs():
            return  # written again since (a session of the same id prefix): launch it
        raise LaunchError(503, ended[name])


class LaunchErrorFilter(logging.Filter):
    """Log a failed bai launch as one warning line: the reason is the message, not a bug."""

    def filter(self, record: logging.LogRecord) -> bool:
        info: Any = record.exc_info
        if info and launch_error(info[1]) is not None:
            record.exc_info = None
            record.exc_text = None
            if record.levelno > logging.WARNING:
                record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def forget_failed_launches(kernels: Any) -> list[str]:
    """Drop the kernels whose launch ended without a kernel from ``kernels``' pending table.

    jupyter_client keeps a launch's task in ``_pending_kernels`` until the kernel is up;
    one that failed stays there for ever, and every ``shutdown_all`` then raises 404 on it.
    """
    pending = getattr(kernels, "_pending_kernels", None)
    if not isinstance(pending, dict):
        return []
    failed = [
        kernel_id
        for kernel_id, task in list(pending.items())
        if kernel_id not in kernels and isinstance(task, asyncio.Future) and task.done()
    ]
    for kernel_id in failed:
        pending.pop(kernel_id, None)
    return failed


async def shut_down_kernels(kernels: Any, log: logging.Logger) -> None:
    """Shut every kernel of ``kernels`` (a MappingKernelManager) down, all to their end.

    Failed launches are forgotten first (also for the server's own ``cleanup_kernels``,
    which runs later); a kernel whose shutdown raises is logged as one line, and the
    others are still awaited, so the manager stops only once each has ended its session.
    """
    forget_failed_launches(kernels)
    kernel_ids = list(kernels.list_kernel_ids())
    await asyncio.gather(*(_launch_ended(kernels.get_kernel(k)) for k in kernel_ids))
    results = await asyncio.gather(
        *(ensure_async(kernels.shutdown_kernel(kernel_id)) for kernel_id in kernel_ids),
        return_exceptions=True,
    )
    for kernel_id, result in zip(kernel_ids, results, strict=True):
        if isinstance(result, Exception):
            log.warning("bai-jupyter: kernel %s did not shut down cleanly: %s", kernel_id, result)
    forget_failed_launches(kernels)  # a launch that failed meanwhile (a restart's)


#: How long stopping waits for a kernel's launch to end once its session was cancelled.
_LAUNCH_END_WAIT = 30.0


async def _launch_ended(km: Any) -> None:
    """Wait until a kernel mid-launch (a restart) is up or has failed, cancelling a bai
    launch's session so that it fails at once instead of waiting for its kernel."""
    ready = getattr(km, "ready", None)
    provisioner = getattr(km, "provisioner", None)
    if not isinstance(ready, asyncio.Future):
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _LAUNCH_END_WAIT
    while not ready.done() and loop.time() < deadline:
        if isinstance(provisioner, BaiProvisioner):
            await provisioner.cancel_launch()
        await asyncio.wait([ready], timeout=0.5)
