"""Sessions spread over several agents: refused early when they cannot run, prepared, released.

A ``multi-node`` request that no single agent of its group could hold must be
spread: at ``create`` its group's agents must be in one active Swarm and see the
data folders it names, else it is refused with what to do. When a pass spreads
a session, its start checks the chosen agents the same way and makes the
session's overlay network; its end removes it. A session one agent holds runs
there on a local bridge, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from ...agents.base import AgentBackend, AgentError
from ...errors import InvalidRequest
from ...model import ClusterMode, Session, SessionSpec
from ...mounts import parse_mount
from ...scheduler.placement import never_fits
from ..core import Core
from ..requests.mount_check import MountCheck
from .shared_folders import SharedFolders
from .swarm import SwarmNetworks

__all__ = ["MultiNode"]


class MultiNodeSettings(Protocol):
    @property
    def default_image(self) -> str: ...


class MultiNode:
    """What a session spread over several agents needs beyond one agent's session."""

    def __init__(self, core: Core, settings: MultiNodeSettings, mounts: MountCheck) -> None:
        self.core = core
        self.settings = settings
        self.mounts = mounts
        self.swarm = SwarmNetworks(core)
        self.folders = SharedFolders(core)

    async def admit(self, spec: SessionSpec, owner: str) -> None:
        """Refuse a multi-node request that must be spread where it could not run."""
        if spec.cluster_mode is not ClusterMode.MULTI_NODE or spec.cluster_size < 2:
            return
        records = await self.core.query(lambda tx: tx.list_agents(spec.resource_group))
        usable = [r for r in records if r.schedulable]
        whole = spec.total_resources
        if never_fits(spec, usable) or any(whole.fits_in(r.capacity) for r in usable):
            return  # refused as never fitting by the queue, or one agent can hold it
        agents = [self.core.agents[r.id] for r in usable if r.id in self.core.agents]
        try:
            await self.swarm.check(agents)
            await self._check_folders(spec, owner, agents)
        except AgentError as exc:
            sizes = spec.resources.describe() if spec.uniform else f"{whole.describe()} in all"
            field = "mounts" if isinstance(exc, _FoldersUnseen) else "cluster_mode"
            raise InvalidRequest(
                f"{field}: {spec.cluster_size} kernels of {sizes} fit no "
                f"single agent of resource group {spec.resource_group!r}, so they must be "
                f"spread: {exc}",
                field=field,
            ) from exc

    async def prepare(self, session: Session, agents: Iterable[AgentBackend]) -> str:
        """Check the chosen agents and make the session's overlay network; its name."""
        chosen = list(agents)
        await self._check_folders(session.spec, session.owner, chosen)
        return await self.swarm.open(session.id, chosen)

    async def release(self, session: Session) -> None:
        """Remove the session's overlay (kept for the sweep when that cannot be done now)."""
        await self.swarm.close(session.id)

    async def sweep(self) -> None:
        """Remove overlays of sessions that have ended (any left behind)."""
        await self.swarm.sweep()

    async def retry(self) -> None:
        """Try again to remove the overlays that could not be removed at the end."""
        await self.swarm.retry()

    async def _check_folders(
        self, spec: SessionSpec, owner: str, agents: list[AgentBackend]
    ) -> None:
        root = self.mounts.folders_root()
        try:
            every = dict.fromkeys(m for role in spec.cluster_roles() for m in role.mounts)
            named = [m for m in every if parse_mount(m, owner, root).folder]
        except ValueError:
            return  # the mount policy says what is wrong with it
        if not named:
            return
        try:
            image = spec.image or self.settings.default_image
            await self.folders.check(root, agents, image)
        except AgentError as exc:
            raise _FoldersUnseen(f"data folder {', '.join(named)}: {exc}") from exc


class _FoldersUnseen(AgentError):
    """Agents that do not see the data folders."""
