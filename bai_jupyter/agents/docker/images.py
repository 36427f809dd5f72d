"""Images on one engine: what it has, pulls from a registry, save and load streams.

Pull progress is the sum of the layers' ``progressDetail``; a load consumes a
``docker save`` stream chunk by chunk from another engine (see
``agents.multinode.copy_image``), so no copy of the image is ever kept whole.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import PurePosixPath
from typing import Any

import docker.errors

from ..base import AgentError
from ..multinode import ImageInfo, Progress
from .engine import BindMount, Engine, explain

__all__ = ["EngineImages"]

#: Chunks of a save stream (a bounded amount in flight, whatever the image's size).
CHUNK = 1 << 20
#: How long a registry gets to say whether it serves an image.
REGISTRY_TIMEOUT = 10.0


def _stream_errors(lines: Iterable[Any], what: str) -> None:
    """Raise the first ``{"error": …}`` line of an engine's JSON progress stream."""
    for line in lines:
        if isinstance(line, dict) and line.get("error"):
            raise AgentError(f"{what}: {line['error']}")


class EngineImages:
    """The images of one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def info(self, image: str) -> ImageInfo | None:
        api = await self.engine.api()
        try:
            found = await asyncio.to_thread(api.inspect_image, image)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.DockerException as exc:
            raise AgentError(
                f"agent {self.engine.agent_id}: looking up image {image}: {explain(exc)}"
            ) from exc
        return ImageInfo(
            id=str(found["Id"]),
            size=int(found.get("Size") or 0),
            repo_digests=tuple(found.get("RepoDigests") or ()),
        )

    async def registry_has(self, image: str) -> bool:
        api = await self.engine.api()
        try:
            await asyncio.wait_for(
                asyncio.to_thread(api.inspect_distribution, image), REGISTRY_TIMEOUT
            )
        except (docker.errors.DockerException, asyncio.TimeoutError):
            return False
        return True

    async def pull(self, image: str, progress: Progress) -> None:
        api = await self.engine.api()
        what = f"agent {self.engine.agent_id}: cannot pull {image}"

        def pull() -> None:
            layers: dict[str, tuple[int, int]] = {}
            for line in api.pull(image, stream=True, decode=True):
                if line.get("error"):
                    raise AgentError(f"{what}: {line['error']}")
                detail = line.get("progressDetail") or {}
                if line.get("id") and detail.get("total"):
                    layers[line["id"]] = (int(detail.get("current") or 0), int(detail["total"]))
                    progress(sum(c for c, _ in layers.values()), sum(t for _, t in layers.values()))

        await self.engine.call(what, pull)

    async def export(self, image: str) -> Iterator[bytes]:
        api = await self.engine.api()
        chunks: Iterator[bytes] = await self.engine.call(
            f"agent {self.engine.agent_id}: cannot save {image}", api.get_image, image, CHUNK
        )
        return chunks

    async def load(self, image: str, chunks: Iterator[bytes]) -> None:
        api = await self.engine.api()
        what = f"agent {self.engine.agent_id}: cannot load {image}"
        await self.engine.call(what, lambda: _stream_errors(api.load_image(chunks), what))

    async def read_host_file(self, path: str, image: str | None) -> bytes | None:
        """Read a file of the engine's machine through a container that is created, never
        started: the engine checks a bind's source exists at create, and copies out of a
        stopped container's mounts."""
        api = await self.engine.api()
        candidates = [image] if image else []
        if not image or await self.info(image) is None:
            listed = await self.engine.call("cannot list images", api.images)
            candidates = [str(i["Id"]) for i in listed[:1]]
        if not candidates:
            return None  # nothing to create a container from
        source = PurePosixPath(path)

        def read() -> bytes | None:
            config = api.create_host_config(
                mounts=[BindMount("/bai-look", str(source.parent), type="bind", read_only=True)],
                network_mode="none",
            )
            try:
                made = api.create_container(
                    candidates[0], command=["true"], host_config=config, network_disabled=True
                )
            except docker.errors.APIError as exc:
                if "does not exist" in explain(exc):
                    return None
                raise
            try:
                stream, _ = api.get_archive(made["Id"], f"/bai-look/{source.name}")
                with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                    member = tar.next()
                    file = tar.extractfile(member) if member is not None else None
                    return file.read() if file is not None else None
            except docker.errors.NotFound:
                return None
            finally:
                api.remove_container(made["Id"], force=True)

        return await self.engine.call(f"agent {self.engine.agent_id}: cannot look at {path}", read)
