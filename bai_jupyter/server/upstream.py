"""The proxy's HTTP client towards main1's services: one per server, not one per request.

jupyter-server-proxy makes a fresh client (and a fresh resolver) for every
request; kernels are reached at IP addresses, so ours answers those without
asking the system resolver (a thread hop per request under tornado).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from tornado.netutil import DefaultLoopResolver, Resolver
from tornado.simple_httpclient import SimpleAsyncHTTPClient

__all__ = ["LiteralFirstResolver", "upstream_client"]


class LiteralFirstResolver(Resolver):
    """IP literals resolve to themselves at once; names go to the default resolver."""

    def initialize(self) -> None:
        self._names = DefaultLoopResolver()

    async def resolve(
        self, host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[tuple[int, Any]]:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            found: list[tuple[int, Any]] = await self._names.resolve(host, port, family)
            return found
        if address.version == 6:
            return [(socket.AF_INET6, (host, port, 0, 0))]
        return [(socket.AF_INET, (host, port))]

    def close(self) -> None:
        self._names.close()


def upstream_client() -> SimpleAsyncHTTPClient:
    """A client for many concurrent proxied requests (bodies stream: no size limit)."""
    return SimpleAsyncHTTPClient(
        force_instance=True,
        max_clients=1000,
        resolver=LiteralFirstResolver(),
        max_body_size=1 << 62,
    )
