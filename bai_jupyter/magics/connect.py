"""Which manager ``%bai`` talks to: ``BAI_JUPYTER_URL``, else the server that started the kernel."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..client import RemoteManager
from ..errors import Unavailable
from ..loop_thread import LoopThread

#: The loop every magic's coroutines run on (the kernel's own is busy running the magic).
_LOOP = LoopThread("bai-jupyter-magics")


def _running_server() -> dict[str, Any] | None:
    """The Jupyter server that started this kernel, else the newest one running here."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return None
    servers: list[dict[str, Any]] = [
        s for s in list_running_servers() if s.get("url") and not s.get("sock")
    ]
    parent = os.environ.get("JPY_PARENT_PID", "")
    for server in servers:
        if str(server.get("pid")) == parent:
            return server
    runtime = Path(jupyter_runtime_dir())

    def started(server: dict[str, Any]) -> float:
        info = runtime / f"jpserver-{server.get('pid')}.json"
        return info.stat().st_mtime if info.exists() else 0.0

    newest: dict[str, Any] | None = max(servers, key=started, default=None)
    return newest


def find_manager() -> RemoteManager:
    """The manager at ``BAI_JUPYTER_URL``, else that of the running Jupyter server."""
    if os.environ.get("BAI_JUPYTER_URL"):
        return RemoteManager.from_env()
    server = _running_server()
    if server is not None:
        return RemoteManager(str(server["url"]), str(server.get("token") or ""))
    raise Unavailable(
        "no bai-jupyter server found: set BAI_JUPYTER_URL to the URL of a Jupyter server "
        "running the bai_jupyter extension (and BAI_JUPYTER_TOKEN to its token), or start "
        "one on this machine (jupyter lab)"
    )


def own_session() -> str | None:
    """This kernel's session id when it runs inside a bai session."""
    return os.environ.get("BACKENDAI_SESSION_ID") or None
