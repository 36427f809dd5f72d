"""Image presence per agent: an agent that lacks the session's image gets it in PULLING.

Where it comes from: an image some agent has that came from a registry (it has a
repo digest) is pulled from that registry, and copied from that agent when the
registry does not answer; one built locally (no digest: no registry has it) is
copied from an agent that has it, streamed engine to engine; one no agent has is
pulled (``create`` refused it unless a registry serves it). Only the operator's
``registries`` are ever asked or pulled from: an image naming another registry (say
``127.0.0.1:5999/x``) makes no engine connect there. The session moves to
PULLING with the plan in ``status_data["pulling"]`` before anything is fetched,
and that record follows each agent's progress (at most every half second): its
``phase`` (``pulling`` from a registry, ``copying`` the save stream, ``loading``
while the target engine adds the layers it was sent, ``done``) and ``done`` of
``total`` bytes, whose ``progress`` is below 1 until the phase is ``done``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from ...agents.base import AgentBackend, AgentError
from ...agents.multinode import ImageInfo, MultiNodeAgent, copy_image
from ...model import Session, Status
from ..core import Core, Settings, move

__all__ = ["ImagePresence", "image_known", "registry_of"]

REGISTRY = "registry"
#: The registry of image names that name none, and its other names.
DOCKER_HUB = "docker.io"
_HUB_ALIASES = frozenset({"index.docker.io", "registry-1.docker.io"})
#: Seconds between progress writes to the store while pulling.
_FLUSH_EVERY = 0.5


def registry_of(image: str) -> str:
    """The registry an image reference names, as Docker reads it: a first component with
    a '.' or ':' or 'localhost' is a registry; none means Docker Hub."""
    first, slash, _ = image.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        return DOCKER_HUB
    host = first.lower()
    return DOCKER_HUB if host in _HUB_ALIASES else host


async def image_known(
    core: Core, image: str, group: str, registries: list[str]
) -> tuple[bool, list[str]]:
    """Whether an agent (of ``group`` first, then any) has ``image`` or one of the allowed
    ``registries`` serves it; with the errors of agents that could not say."""
    agents = [a for a in core.agents.values() if a.id not in core.lost]
    agents.sort(key=lambda a: a.resource_group != group)
    failures: list[str] = []
    for agent in agents:
        try:
            if await agent.has_image(image):
                return True, []
        except AgentError as exc:
            failures.append(str(exc))
    if registry_of(image) not in registries:
        return False, failures  # never ask an engine to contact a registry not allowed
    for agent in agents:
        if isinstance(agent, MultiNodeAgent) and await agent.registry_has(image):
            return True, []
    return False, failures


def _progress(entry: Mapping[str, Any]) -> float:
    """``done / total`` to three places, rounded down: 1.0 only once the phase is ``done``."""
    if entry.get("phase") == "done":
        return 1.0
    return min(int(1000 * entry["done"] / entry["total"]) / 1000, 0.999)


class ImagePresence:
    """Brings a session's image to each of its agents that lacks it."""

    def __init__(self, core: Core, settings: Settings) -> None:
        self.core = core
        self.settings = settings
        #: One fetch per (agent, image) at a time: a second session waits, then finds it.
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def ensure(
        self, session: Session, image: str, agents: Mapping[str, AgentBackend]
    ) -> None:
        """Fetch ``image`` where it is missing, in PULLING; AgentError when it cannot."""
        missing: list[MultiNodeAgent] = []
        for agent in agents.values():
            if await agent.has_image(image):
                continue
            if not isinstance(agent, MultiNodeAgent):
                raise AgentError(f"image {image} is not on agent {agent.id}, which cannot fetch it")
            missing.append(agent)
        if not missing:
            return
        plan = {
            agent.id: {
                "from": await self._source(image, agent),
                "phase": "waiting",
                "done": 0,
                "total": 0,
            }
            for agent in missing
        }

        def pulling(s: Session) -> None:
            if s.status is not Status.PULLING:  # a second image of the same session
                move(s, Status.PULLING, time.time())
            s.status_data = {**s.status_data, "pulling": {"image": image, "agents": plan}}

        await self.core.edit(session.id, pulling)
        written: list[Any] = []

        async def flush() -> None:
            await self._flush(session.id, image, plan, written)

        flusher = self.core.every(lambda: _FLUSH_EVERY, flush, "writing the pull's progress")
        flusher.start()
        try:
            results = await asyncio.gather(
                *(self._fetch(agent, image, plan[agent.id]) for agent in missing),
                return_exceptions=True,
            )
        finally:
            await flusher.stop()
        await self._write(session.id, image, plan)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _holders(self, image: str, target: object) -> list[tuple[MultiNodeAgent, ImageInfo]]:
        """The other reachable agents that have ``image``."""
        found: list[tuple[MultiNodeAgent, ImageInfo]] = []
        for agent in self.core.agents.values():
            if agent is target or agent.id in self.core.lost:
                continue
            if not isinstance(agent, MultiNodeAgent):
                continue
            try:
                info = await agent.image_info(image)
            except AgentError:
                continue
            if info is not None:
                found.append((agent, info))
        return found

    async def _source(self, image: str, target: object) -> str | None:
        """``registry``, the id of an agent to copy from (see the module's docstring), or
        None: nowhere allowed has it."""
        holders = await self._holders(image, target)
        allowed = registry_of(image) in self.settings.registries
        if allowed and (not holders or any(info.repo_digests for _, info in holders)):
            return REGISTRY
        return holders[0][0].id if holders else None

    async def _fetch(self, agent: MultiNodeAgent, image: str, entry: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()

        def progress(done: int, total: int) -> None:  # from a worker thread
            loop.call_soon_threadsafe(entry.update, {"done": done, "total": total})

        def loading() -> None:  # from a worker thread
            loop.call_soon_threadsafe(entry.update, {"phase": "loading"})

        async with self._locks.setdefault((agent.id, image), asyncio.Lock()):
            if await agent.image_info(image) is not None:
                entry.update({"from": "already there", "phase": "done"})  # fetched meanwhile
                return
            errors: list[str] = []
            if entry["from"] == REGISTRY:
                entry["phase"] = "pulling"
                try:
                    await agent.pull_image(image, progress)
                except AgentError as exc:
                    errors.append(f"the registry: {exc}")
                    holders = await self._holders(image, agent)
                    entry["from"] = holders[0][0].id if holders else None
            source = self.core.agents.get(entry["from"] or "")
            if isinstance(source, MultiNodeAgent):
                entry.update({"phase": "copying", "done": 0, "total": 0})
                try:
                    await copy_image(source, agent, image, progress, loading)
                except AgentError as exc:
                    errors.append(f"copying from {source.id}: {exc}")
            if await agent.image_info(image) is None:
                registry = registry_of(image)
                why = "; ".join(errors) or (
                    "no registry and no agent has it"
                    if registry in self.settings.registries
                    else f"no agent has it, and {registry} is not in BaiSessionManager.registries"
                )
                raise AgentError(f"agent {agent.id} could not get image {image}: {why}")
            entry.update({"phase": "done", "done": entry["total"]})

    async def _flush(
        self, session_id: str, image: str, plan: dict[str, dict[str, Any]], written: list[Any]
    ) -> None:
        """Write the progress to the store if it changed since ``written`` (what was)."""
        now = [dict(entry) for entry in plan.values()]
        if now != written:
            await self._write(session_id, image, plan)
            written[:] = now

    async def _write(self, session_id: str, image: str, plan: dict[str, dict[str, Any]]) -> None:
        agents = {
            agent_id: {**entry, "progress": _progress(entry)} if entry["total"] else dict(entry)
            for agent_id, entry in plan.items()
        }

        def noting(s: Session) -> None:
            s.status_data = {**s.status_data, "pulling": {"image": image, "agents": agents}}

        await self.core.edit(session_id, noting)
