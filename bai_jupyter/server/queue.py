"""``/bai/api/v1/scheduler``: each resource group's settings and its pending queue, in order.

A user sees the whole queue's length and order, with why each of their own
sessions waits; other users' sessions only as positions (all, for an admin).
"""

from __future__ import annotations

import asyncio

from jupyter_server.auth.decorator import authorized
from tornado import web

from .base import BaiHandler

__all__ = ["QueueHandler"]


class QueueHandler(BaiHandler):
    """Per resource group: its scheduler settings and pending queue, with why each waits."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        groups, leader = await asyncio.gather(self.api.queue(), self.api.leader())
        self.write_json({"resource_groups": groups, **leader})
