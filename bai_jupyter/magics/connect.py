"""Which manager ``%bai`` talks to: ``BAI_JUPYTER_URL``, else the server that started the kernel."""

from __future__ import annotations

import os

from ..client import find_manager
from ..loop_thread import LoopThread

__all__ = ["_LOOP", "NoManager", "find_manager", "own_session"]

#: The loop every magic's coroutines run on (the kernel's own is busy running the magic).
_LOOP = LoopThread("bai-jupyter-magics")


class NoManager(Exception):
    """No manager answers ``%bai``: the cell stops here, with this one line and no
    traceback (going on, a later line using what the magic returns would fail with an
    error that says nothing of why, e.g. ``None`` has no ``result``)."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return [f"bai: {self}"]


def own_session() -> str | None:
    """This kernel's session id when it runs inside a bai session."""
    return os.environ.get("BACKENDAI_SESSION_ID") or None
