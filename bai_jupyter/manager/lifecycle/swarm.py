"""The agents' Docker Swarm: is it one, which node manages it, and the sessions' overlays.

A session spread over several agents needs them in one active Swarm (forming
it is the operator's step); its kernels join one overlay network made through
a manager node of that Swarm, removed the same way when the session ends. A
removal refused (an unreachable agent still holds a kernel on it, or the Swarm
has not yet seen a kernel go) is retried at every liveness check until it is
done, and :meth:`SwarmNetworks.sweep` finds any left behind at the manager's start.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...agents.base import AgentBackend, AgentError
from ...agents.multinode import MultiNodeAgent, SwarmNode
from ...errors import NotFound
from ...kernel_plan import LABEL_ROOT, LABEL_SCOPE, LABEL_SESSION
from ..core import Core

__all__ = ["HOW_TO_FORM", "SwarmNetworks"]

#: What a refusal says to do.
HOW_TO_FORM = (
    "form one: `docker swarm init --advertise-addr ADDR` on one engine, then "
    "`docker swarm join --token TOKEN ADDR:2377` on each other one (`docker swarm "
    "join-token worker` prints the command); see docs/multinode.md"
)


class SwarmNetworks:
    """Checks the agents' Swarm and makes, removes and sweeps the sessions' overlays."""

    def __init__(self, core: Core) -> None:
        self.core = core
        #: Sessions whose overlay could not be removed yet.
        self.pending: set[str] = set()

    def _reachable(self) -> list[MultiNodeAgent]:
        """Connected agents that can be Swarm members, those marked lost left out."""
        return [
            agent
            for agent in self.core.agents.values()
            if isinstance(agent, MultiNodeAgent) and agent.id not in self.core.lost
        ]

    async def check(self, agents: Iterable[AgentBackend]) -> MultiNodeAgent:
        """A manager node of the one active Swarm every agent of ``agents`` is in; AgentError
        saying which agent is not and how to form a Swarm otherwise."""
        problems: list[str] = []
        nodes: dict[str, SwarmNode] = {}
        for agent in agents:
            if not isinstance(agent, MultiNodeAgent):
                problems.append(f"{agent.id} ({agent.backend} backend) cannot join a Swarm")
                continue
            try:
                node = await agent.swarm_node()
            except AgentError as exc:
                problems.append(str(exc))
                continue
            if not node.active:
                why = f": {node.error}" if node.error else ""
                problems.append(f"{agent.id} is not in an active Swarm ({node.state}{why})")
            nodes[agent.id] = node
        if not problems:
            manager, members = await self._manager(nodes)
            outside = sorted(a for a, node in nodes.items() if node.node_id not in members)
            if manager is None:
                problems.append("no connected agent is a manager node of their Swarm")
            elif outside:
                problems.append(f"{', '.join(outside)} not in the Swarm that {manager.id} manages")
            else:
                return manager
        raise AgentError(
            "a session spread over several agents needs them in one active Docker Swarm: "
            f"{'; '.join(problems)}; {HOW_TO_FORM}"
        )

    async def _manager(self, nodes: dict[str, SwarmNode]) -> tuple[MultiNodeAgent | None, set[str]]:
        """A manager node (the session's own agents first) and the Swarm's node ids."""
        candidates = sorted(self._reachable(), key=lambda a: a.id not in nodes)
        for agent in candidates:
            node = nodes.get(agent.id)
            try:
                if node is None:
                    node = await agent.swarm_node()
                if node.manager:
                    return agent, await agent.swarm_members()
            except AgentError:
                continue
        return None, set()

    def _labels(self, session_id: str) -> dict[str, str]:
        return {
            LABEL_ROOT: "1",
            LABEL_SESSION: session_id,
            LABEL_SCOPE: self.core.require_store().id,
        }

    async def open(self, session_id: str, agents: Iterable[AgentBackend]) -> str:
        """The session's overlay network, made through a manager node; its name."""
        manager = await self.check(agents)
        return await manager.create_overlay(session_id, self._labels(session_id))

    async def close(self, session_id: str) -> None:
        """Remove the session's overlay, or keep it in :attr:`pending` to try again (a kernel
        of an unreachable agent still holds it, or no manager node answers)."""
        for agent in self._reachable():
            try:
                if not (await agent.swarm_node()).manager:
                    continue
                await agent.remove_overlay(session_id)
            except AgentError as exc:
                if session_id not in self.pending:
                    self.core.log.info(
                        "bai-jupyter: overlay of %s kept for now (removed later): %s",
                        session_id,
                        exc,
                    )
                break
            self.pending.discard(session_id)
            return
        self.pending.add(session_id)

    async def retry(self) -> None:
        """Try again to remove the overlays that could not be removed."""
        for session_id in sorted(self.pending):
            await self.close(session_id)

    async def sweep(self) -> None:
        """Remove the overlays of this store's sessions that have ended (or are unknown)."""
        scope = self.core.require_store().id
        for agent in self._reachable():
            try:
                if not (await agent.swarm_node()).manager:
                    continue
                found = await agent.overlays(f"{LABEL_SCOPE}={scope}")
            except AgentError:
                continue
            for labels in found:
                session_id = labels.get(LABEL_SESSION, "")
                if session_id and not await self._live(session_id):
                    await self.close(session_id)
            return

    async def _live(self, session_id: str) -> bool:
        try:
            return not (await self.core.get(session_id)).status.is_terminal
        except NotFound:
            return False
