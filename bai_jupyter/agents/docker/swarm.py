"""One engine as a Docker Swarm member: its membership, and the sessions' overlay networks.

A session spread over several engines gets one attachable, internal overlay
network (made and removed on a manager node; workers see it once a kernel joins
it), named like a session bridge (``bai-<S[:12]>``), so kernels resolve
``main1``, ``sub1`` … across engines through Swarm's DNS and the event watcher
treats a cut from it like a cut from a bridge. Not encrypted: encryption needs
IPsec (ESP), which not every kernel has.
"""

from __future__ import annotations

import contextlib
from typing import Any

import docker.errors

from ..multinode import SwarmNode
from .engine import Engine
from .networks import create_network_once, network_name

__all__ = ["SwarmMembership"]


class SwarmMembership:
    """Asks one engine about its Swarm and makes or removes overlays through it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def node(self) -> SwarmNode:
        api = await self.engine.api()
        info = await self.engine.call(f"agent {self.engine.agent_id}: docker info", api.info)
        swarm: dict[str, Any] = info.get("Swarm") or {}
        return SwarmNode(
            node_id=str(swarm.get("NodeID") or ""),
            state=str(swarm.get("LocalNodeState") or "inactive"),
            manager=bool(swarm.get("ControlAvailable")),
            error=str(swarm.get("Error") or ""),
        )

    async def members(self) -> set[str]:
        api = await self.engine.api()
        nodes = await self.engine.call(f"agent {self.engine.agent_id}: swarm nodes", api.nodes)
        return {str(node["ID"]) for node in nodes}

    async def create_overlay(self, session_id: str, labels: dict[str, str]) -> str:
        api = await self.engine.api()
        name = network_name(session_id)

        def create() -> None:
            create_network_once(
                api, name, driver="overlay", attachable=True, internal=True, labels=labels
            )

        await self.engine.call(f"cannot create overlay network {name}", create)
        return name

    async def remove_overlay(self, session_id: str) -> None:
        api = await self.engine.api()
        name = network_name(session_id)

        def remove() -> None:
            with contextlib.suppress(docker.errors.NotFound):
                api.remove_network(name)

        await self.engine.call(f"cannot remove overlay network {name}", remove)

    async def overlays(self, label: str) -> list[dict[str, str]]:
        api = await self.engine.api()
        found = await self.engine.call(
            "cannot list overlay networks",
            api.networks,
            filters={"driver": "overlay", "label": label},
        )
        return [dict(n.get("Labels") or {}) for n in found]
