"""``/bai/api/v1/agents``: each agent's capacity, occupied and free slots, and its kernels."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from .base import BaiHandler

__all__ = ["AgentsHandler"]


class AgentsHandler(BaiHandler):
    """Every agent; others' kernels show only their slots (all of them, for an admin)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.write_json({"agents": await self.api.agents()})
