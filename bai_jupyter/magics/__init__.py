"""``%bai``: drive sessions from a notebook (``%load_ext bai_jupyter``).

The magics talk to the session manager of a Jupyter server over its REST API
(:class:`~bai_jupyter.client.RemoteManager`): ``BAI_JUPYTER_URL`` and
``BAI_JUPYTER_TOKEN`` when set (the server extension gives every kernel it starts
them), else
the Jupyter server this kernel was started by, from its runtime file. Inside a
bai kernel they know their own session from ``BACKENDAI_SESSION_ID``. Where no
manager answers, the magic raises :class:`NoManager`: the cell stops with one line.

Magics are synchronous, but an ipykernel already runs an event loop on the
main thread, so every coroutine runs on a private loop in a daemon thread
(:class:`bai_jupyter.loop_thread.LoopThread`); the main thread only waits and prints, which keeps
Ctrl-C (a KeyboardInterrupt in the main thread) working everywhere.
"""

from __future__ import annotations

from typing import Any

from ..text import format_table
from .commands import BaiMagics, command_help, overview
from .connect import NoManager, find_manager, own_session
from .run import RunResult, batch_request, progress_line, split_command, user_output

__all__ = [
    "BaiMagics",
    "NoManager",
    "RunResult",
    "batch_request",
    "command_help",
    "find_manager",
    "format_table",
    "load_ipython_extension",
    "overview",
    "own_session",
    "progress_line",
    "split_command",
    "user_output",
]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext bai_jupyter``."""
    ipython.register_magics(BaiMagics)
