"""Kernel launches that cannot happen: clean 4xx answers and one-line log records.

A bai kernel's launch fails with :class:`~bai_jupyter.provisioner.LaunchError` (an
``HTTPError`` carrying the manager's 4xx, e.g. a request no agent can ever fit).
``POST /api/kernels`` passes it on (its own status: a 4xx, or 504 for a
``launch_timeout``), but jupyter_server's ``POST /api/sessions`` turns every exception
into a 500, and jupyter_client logs each failed launch with
its whole traceback twice: a user error then reads like a server crash.
"""

from __future__ import annotations

import logging
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.services.sessions.handlers import SessionRootHandler
from jupyter_server.utils import ensure_async
from tornado import web

from ..provisioner import LaunchError

__all__ = ["LaunchErrorFilter", "SessionsLaunchHandler", "launch_error"]


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
        try:
            await ensure_async(super().post())
        except web.HTTPError as exc:
            cause = launch_error(exc)
            if exc.status_code == 500 and cause is not None:
                raise cause from None  # its own status: 4xx, or 504 for a launch_timeout
            raise


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
