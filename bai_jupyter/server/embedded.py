"""Kernel access for a manager embedded in a kernel provisioner's process (no server).

``jupyter execute``, nbclient, papermill and ``jupyter console`` start bai kernels
on a manager of their own (``reach``), with no Jupyter server to serve the API.
So that ``%bai`` works in those kernels too, that process serves the kernels'
API as a server would: the same kernel-access listener (``kernel_access``), the
same handlers and per-session tokens, on the address its agents' kernels reach
this host at, let through the host firewall; kernels get ``BAI_JUPYTER_URL``
and ``BAI_JUPYTER_TOKEN`` for it. Only the kernels' listener is opened: people
have no API here (no server, no service-port proxy).
"""

from __future__ import annotations

from typing import Any

from .host import ApiHost

__all__ = ["EmbeddedHost"]


class EmbeddedHost(ApiHost):
    """The host of an embedded manager: starts it, then its kernels' API; stops both."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.init_host()  # before start: stop must work whatever start got to

    @classmethod
    def section_names(cls) -> list[str]:
        # The server's settings of kernel access (c.BaiJupyterApp.kernel_access,
        # kernel_tokens_create_sessions …) apply to an embedded manager's kernels too.
        names: list[str] = super().section_names()
        return [*names[:-1], "BaiJupyterApp", names[-1]]

    async def start(self) -> None:
        """Start the manager, then (``kernel_access``) the kernels' listener on any free
        port. Raises ``ManagerStartFailed`` (its cause: why) when the manager cannot start."""
        await self.start_manager(self.app_settings("/"), 0)

    async def stop(self) -> None:
        """Close the kernels' listener and clients, then stop the manager."""
        await self.run_steps(self.stop_steps())
