"""``/bai/api/v1/agents``: each agent's capacity, occupied and free slots, and its kernels;
``/bai/api/v1/pools``: the warm pools, their sessions and claim counts."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from .base import BaiHandler

__all__ = ["AgentsHandler", "PoolsHandler"]


class AgentsHandler(BaiHandler):
    """Every agent; others' kernels show only their slots (all of them, for an admin)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.write_json({"agents": await self.api.agents()})


class PoolsHandler(BaiHandler):
    """Every warm pool: size, limits, warm and starting sessions, claims, hits, misses."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.write_json({"pools": await self.api.pools()})
