"""What an agent offers for sessions spread over several agents, beyond :class:`AgentBackend`.

A backend that can join a Docker Swarm implements :class:`MultiNodeAgent`: its
membership, the session's overlay network (made and removed through a manager
node), images fetched from a registry or streamed from another agent, and
whether a host file is visible on its machine (a shared file system for data
folders). The manager asks ``isinstance(agent, MultiNodeAgent)``; backends
without it run single-agent sessions only.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .image_bytes import ImageBytes

__all__ = ["ImageInfo", "MultiNodeAgent", "Progress", "SwarmNode", "copy_image"]

#: ``progress(done, total)`` in bytes (``total`` 0: unknown); called from a worker thread.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class SwarmNode:
    """This agent's engine as a Swarm member (``docker info``'s ``Swarm``)."""

    node_id: str
    #: ``active``, ``inactive``, ``pending``, ``error``, ``locked``.
    state: str
    #: A manager node: it can make and remove overlay networks and list the nodes.
    manager: bool
    error: str = ""

    @property
    def active(self) -> bool:
        return self.state == "active" and bool(self.node_id)


@dataclass(frozen=True)
class ImageInfo:
    """An image as one agent has it."""

    id: str
    size: int
    #: ``repo@sha256:…`` where it came from a registry; empty for an image built here.
    repo_digests: tuple[str, ...] = ()


class MultiNodeAgent(abc.ABC):
    """An agent that can run part of a session spread over several agents."""

    id: str

    # --- the Swarm ---------------------------------------------------------------------------

    @abc.abstractmethod
    async def swarm_node(self) -> SwarmNode:
        """Its engine's Swarm membership, asked now."""

    @abc.abstractmethod
    async def swarm_members(self) -> set[str]:
        """The node ids of the Swarm (a manager node only)."""

    @abc.abstractmethod
    async def create_overlay(self, session_id: str, labels: dict[str, str]) -> str:
        """Make the session's attachable, internal overlay network and return its name (a
        manager node only; idempotent)."""

    @abc.abstractmethod
    async def remove_overlay(self, session_id: str) -> None:
        """Remove the session's overlay network (a manager node only; gone already: fine).

        Refused while a kernel is still attached anywhere, an unreachable node's too."""

    @abc.abstractmethod
    async def overlays(self, label: str) -> list[dict[str, str]]:
        """The labels of every overlay network carrying ``label`` (a manager node only)."""

    # --- images ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def image_info(self, image: str) -> ImageInfo | None:
        """The image as this agent has it; ``None`` when it has not."""

    @abc.abstractmethod
    async def registry_has(self, image: str) -> bool:
        """Whether a registry this agent reaches serves ``image`` (asks, pulls nothing)."""

    @abc.abstractmethod
    async def pull_image(self, image: str, progress: Progress) -> None:
        """Pull ``image`` from its registry; AgentError when none serves it."""

    @abc.abstractmethod
    async def export_image(self, image: str) -> Iterator[bytes]:
        """``image`` as a ``docker save`` stream: a blocking iterator, read in a thread."""

    @abc.abstractmethod
    async def import_image(self, image: str, chunks: Iterator[bytes]) -> None:
        """Load a ``docker save`` stream (consumed as it arrives, nothing kept whole)."""

    # --- files ---------------------------------------------------------------------------------

    @abc.abstractmethod
    async def read_host_file(self, path: str, image: str | None = None) -> bytes | None:
        """The content of ``path`` on this agent's machine; ``None`` when it does not exist
        there (or the agent cannot look: it has no image to look with)."""


async def copy_image(
    source: MultiNodeAgent,
    target: MultiNodeAgent,
    image: str,
    progress: Progress,
    loading: Callable[[], None],
) -> None:
    """Stream ``image`` from one agent's engine into another's: one thread reads the
    source's save stream chunk by chunk while the target loads it (no file in between).

    ``progress(done, total)`` counts in the image's size on the source, fixed before the
    first chunk (see :mod:`.image_bytes`), so done never passes total; ``loading()`` is
    called once every byte is sent, while the target still adds the layers (seconds)."""
    info = await source.image_info(image)
    total = info.size if info is not None else 0
    chunks = await source.export_image(image)
    counter = ImageBytes()
    progress(0, total)

    def counted() -> Iterator[bytes]:
        try:
            for chunk in chunks:
                counter.feed(chunk)
                progress(min(counter.counted, total) if total else counter.counted, total)
                yield chunk
            loading()  # the consumer asked past the last chunk: all of it was sent
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    await target.import_image(image, counted())
