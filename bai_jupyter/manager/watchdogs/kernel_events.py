"""What kernels report: exits, OOM kills and lost networks become state changes.

A kernel stopped with its agent (a Docker engine stopped cleanly stops its
containers, and main1's runtime then exits 0) is the agent's end, not the
kernel's: its session ends ``agent-lost`` naming the agent, as when it goes silent.
"""

from __future__ import annotations

import asyncio
import time

from ...agents.base import AgentBackend, KernelEvent, KernelEventKind
from ...errors import NotFound
from ...model import ACTIVE, STARTING, IllegalTransition, KernelRole, Session, SessionType
from ..core import Core, Settings
from ..lifecycle.start_stop import Lifecycle
from .liveness import fail_for_agent

__all__ = ["KernelWatcher"]


class KernelWatcher:
    """Follows each agent's kernel events and ends, fails or notes sessions accordingly."""

    def __init__(self, core: Core, settings: Settings, lifecycle: Lifecycle) -> None:
        self.core = core
        self.settings = settings
        self.lifecycle = lifecycle

    async def watch(self, agent: AgentBackend) -> None:
        """Handle the agent's events until it closes; a failing stream is reopened."""
        while True:
            try:
                async for event in agent.events():
                    self.core.spawn(self.on_kernel_event(event))
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                self.core.log.exception("bai-jupyter: watching agent %s failed; retrying", agent.id)
                await asyncio.sleep(1)

    async def on_kernel_event(self, event: KernelEvent) -> None:
        core = self.core
        try:
            session = await core.get(event.session_id)
        except NotFound:
            return
        if session.status in STARTING:
            # A batch command can end before its session is marked RUNNING.
            timeout = self.settings.start_timeout + 5
            session = await core.wait_for(session.id, ACTIVE, timeout=timeout)
        if session.status not in ACTIVE:
            return  # we are removing it ourselves, or it already ended
        kernel = next((k for k in session.kernels if k.id == event.kernel_id), None)
        if kernel is None:
            return
        if event.container_id and kernel.container_id not in (None, event.container_id):
            return  # its container from before a take-over, removed by the new leader
        main = kernel.role is KernelRole.MAIN
        exited = event.kind is KernelEventKind.EXITED
        try:
            if event.kind is KernelEventKind.OOM_KILLED:
                # A process was killed for memory; the kernel's own death comes as EXITED.
                await self._oom_notice(session, kernel.hostname)
            elif exited and event.detail.get("agent_stopped") and kernel.agent_id:
                agent = kernel.agent_id
                hosts = [k.hostname for k in session.kernels if k.agent_id == agent]
                core.log.warning(
                    "bai-jupyter: agent %s stopped: session %s ends (agent-lost)", agent, session.id
                )
                await fail_for_agent(core, self.lifecycle, session, agent, hosts)
            elif exited and main and session.spec.type is SessionType.BATCH:
                await self.lifecycle.finish_batch(session, event)
            elif exited and main and event.exit_code == 0 and not event.detail.get("oom_killed"):
                # main1's ipykernel was asked to shut down (jupyter console's exit, a
                # client's shutdown_request) and its runtime ended cleanly: not a death.
                await self.lifecycle.destroy(session.id, reason="user-requested")
            elif event.kind is KernelEventKind.NETWORK_LOST:
                await self.lifecycle.fail(session, "network-disconnected", kernel.hostname, None)
            else:
                info = "oom-killed" if event.detail.get("oom_killed") else "kernel-died"
                await self.lifecycle.fail(session, info, kernel.hostname, event.exit_code)
        except IllegalTransition:
            pass  # another event or a destroy got there first

    async def _oom_notice(self, session: Session, host: str) -> None:
        """Count a process killed for memory in ``status_data["oom"]`` and tell the watchers."""
        now = time.time()
        store = self.core.require_store()
        notice = {
            "kind": "oom",
            "kernel": host,
            "at": now,
            "message": f"a process in {host} was killed: out of memory (the session goes on)",
        }

        def noting() -> None:
            with store.edit(session.id, notice=notice) as s:
                if s.status in ACTIVE:
                    count = int((s.status_data.get("oom") or {}).get("count", 0)) + 1
                    oom = {"count": count, "last_at": now, "kernel": host}
                    s.status_data = {**s.status_data, "oom": oom}

        await asyncio.to_thread(noting)
        self.core.hub.poke()
