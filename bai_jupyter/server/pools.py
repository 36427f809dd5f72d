"""``/bai/api/v1/pools``: the warm pools, their sessions and claim counts."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from .base import BaiHandler

__all__ = ["PoolsHandler"]


class PoolsHandler(BaiHandler):
    """Every warm pool: size, limits, warm and starting sessions, claims, hits, misses."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.write_json({"pools": await self.api.pools()})
