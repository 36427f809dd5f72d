"""Agent liveness: an agent that stops answering is lost; when it answers again, reconciled.

Every ``agent_check_interval`` each agent is asked whether it answers (a Docker
engine: a ping). One silent for ``agent_lost_timeout`` is marked lost: the
scheduler places nothing there (``schedulable`` off in the store), and the
sessions with a kernel there end ERROR ``agent-lost`` (their kernels on other
agents removed; the rest of the sessions keep running). An agent that answers
again after any silence first drops what it kept (``AgentBackend.reconnect``: its
machine may have died without closing a connection, and a kept one leads
nowhere). Once lost, when it answers again its kernels of sessions that ended
meanwhile are removed (the overlays those sessions held go at the next checks),
and it takes sessions again. An agent that failed to remove an ended session's
kernels while down for less than that is swept the same way when it next answers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Protocol

from ...agents.base import AgentBackend, AgentError
from ...model import ACTIVE, STARTING, Session, Status
from ...store import Transaction
from ..core import Core, move
from ..lifecycle.start_stop import Lifecycle
from .reconcile import Reconciler

__all__ = ["Liveness", "fail_for_agent"]

#: Sessions a lost agent takes down with it (those tearing down already finish alone).
_AFFECTED = [*STARTING, *ACTIVE]


async def fail_for_agent(
    core: Core, lifecycle: Lifecycle, session: Session, agent_id: str, hosts: list[str]
) -> None:
    """End ``session`` ERROR ``agent-lost`` (naming the agent and its ``hosts`` there) and
    remove its kernels, unless it ended meanwhile."""

    def failing(s: Session) -> None:
        if s.status in _AFFECTED:
            move(s, Status.ERROR, time.time(), "agent-lost")
            s.status_data = {**s.status_data, "agent": agent_id, "kernels": hosts}

    session = await core.edit(session.id, failing)
    if session.status is Status.ERROR and session.status_info == "agent-lost":
        await lifecycle.teardown(session, Status.ERROR, "agent-lost")


class LivenessSettings(Protocol):
    @property
    def agent_lost_timeout(self) -> float: ...

    @property
    def agent_check_interval(self) -> float: ...


class Liveness:
    """Asks every agent whether it answers, and acts when one is lost or comes back."""

    def __init__(
        self,
        core: Core,
        settings: LivenessSettings,
        lifecycle: Lifecycle,
        reconciler: Reconciler,
    ) -> None:
        self.core = core
        self.settings = settings
        self.lifecycle = lifecycle
        self.reconciler = reconciler
        self._last_answer: dict[str, float] = {}
        #: Agents that failed a check since they last answered.
        self._silent: set[str] = set()

    async def loop(self) -> None:
        """Check every agent, then wait ``agent_check_interval``; survive anything."""
        interval = lambda: self.settings.agent_check_interval  # noqa: E731
        what = "checking the agents"
        await self.core.every(interval, self.check, what, minimum=0.1, wait_first=False).run()

    async def check(self) -> None:
        """Ask every agent at once; mark the long-silent lost, reconcile the returned."""
        agents = list(self.core.agents.values())
        answers = await asyncio.gather(*(self._answers(agent) for agent in agents))
        now = time.monotonic()
        for agent, answered in zip(agents, answers):
            last = self._last_answer.setdefault(agent.id, now)
            if answered:
                self._last_answer[agent.id] = now
                if agent.id in self._silent:
                    self._silent.discard(agent.id)
                    await agent.reconnect()
                if agent.id in self.core.lost:
                    await self._returned(agent)
                elif agent.id in self.core.unswept:
                    await self._sweep(agent)
                elif agent.id in self.reconciler.unreachable:
                    # Silent when the manager started: its sessions were not judged then.
                    self.reconciler.unreachable.discard(agent.id)
                    await self.reconciler.reconcile()
                continue
            self._silent.add(agent.id)
            if agent.id not in self.core.lost and now - last >= self.settings.agent_lost_timeout:
                await self._lost(agent, now - last)
        await self.lifecycle.multinode.retry()

    async def _answers(self, agent: AgentBackend) -> bool:
        timeout = max(1.0, min(5.0, self.settings.agent_lost_timeout / 2))
        try:
            return await asyncio.wait_for(agent.available(), timeout)
        except (asyncio.TimeoutError, AgentError, OSError):
            return False

    async def _schedulable(self, agent_id: str, value: bool) -> None:
        def put(tx: Transaction) -> None:
            for record in tx.list_agents():
                if record.id == agent_id:
                    tx.put_agent(dataclasses.replace(record, schedulable=value))

        await self.core.db(put)

    async def _lost(self, agent: AgentBackend, silent_for: float) -> None:
        core = self.core
        core.lost.add(agent.id)
        core.log.warning(
            "bai-jupyter: agent %s has not answered for %.0f s: lost; its sessions end "
            "(agent-lost) and nothing is placed there until it answers again",
            agent.id,
            silent_for,
        )
        await self._schedulable(agent.id, False)
        for session in await core.list_sessions(statuses=_AFFECTED):
            hosts = [k.hostname for k in session.kernels if k.agent_id == agent.id]
            if hosts:
                core.spawn(fail_for_agent(core, self.lifecycle, session, agent.id, hosts))

    async def _sweep(self, agent: AgentBackend) -> None:
        """Remove what a teardown could not remove from an agent down for a moment."""
        self.core.unswept.discard(agent.id)
        try:
            await self.reconciler.sweep_agent(agent)
        except AgentError as exc:
            self.core.unswept.add(agent.id)
            self.core.log.warning("bai-jupyter: agent %s: %s (tried again later)", agent.id, exc)

    async def _returned(self, agent: AgentBackend) -> None:
        core = self.core
        core.log.info(
            "bai-jupyter: agent %s answers again (on new connections): reconciling it", agent.id
        )
        try:
            await self.reconciler.sweep_agent(agent)
        except AgentError as exc:
            core.log.warning("bai-jupyter: agent %s: %s (tried again later)", agent.id, exc)
            return
        core.lost.discard(agent.id)
        core.unswept.discard(agent.id)
        await self._schedulable(agent.id, True)
        core.wake()
