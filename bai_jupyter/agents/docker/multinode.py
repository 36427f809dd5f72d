"""The Docker agent's side of spread sessions: :class:`MultiNodeAgent` on one engine.

Every call passes straight through to the engine's Swarm membership
(:mod:`.swarm`) or its images (:mod:`.images`); this mixin only ties them to the
interface the manager asks for, apart from the agent's own work on sessions.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..multinode import ImageInfo, MultiNodeAgent, Progress, SwarmNode
from .images import EngineImages
from .swarm import SwarmMembership

__all__ = ["DockerMultiNode"]


class DockerMultiNode(MultiNodeAgent):
    """The Swarm, images and host files of one engine, for sessions over several agents."""

    swarm: SwarmMembership
    images: EngineImages

    async def swarm_node(self) -> SwarmNode:
        return await self.swarm.node()

    async def swarm_members(self) -> set[str]:
        return await self.swarm.members()

    async def create_overlay(self, session_id: str, labels: dict[str, str]) -> str:
        return await self.swarm.create_overlay(session_id, labels)

    async def remove_overlay(self, session_id: str) -> None:
        await self.swarm.remove_overlay(session_id)

    async def overlays(self, label: str) -> list[dict[str, str]]:
        return await self.swarm.overlays(label)

    async def image_info(self, image: str) -> ImageInfo | None:
        return await self.images.info(image)

    async def registry_has(self, image: str) -> bool:
        return await self.images.registry_has(image)

    async def pull_image(self, image: str, progress: Progress) -> None:
        await self.images.pull(image, progress)

    async def export_image(self, image: str) -> Iterator[bytes]:
        return await self.images.export(image)

    async def import_image(self, image: str, chunks: Iterator[bytes]) -> None:
        await self.images.load(image, chunks)

    async def read_host_file(self, path: str, image: str | None = None) -> bytes | None:
        return await self.images.read_host_file(path, image)
