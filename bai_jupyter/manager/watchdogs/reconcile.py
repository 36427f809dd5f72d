"""When a process starts leading the store: match it against what the agents have.

A session the previous leader left half-started is started again (only the
leader starts sessions); one half-removed by another manager on the store (any
may end sessions) gets that manager's time first; a batch that ended while nobody watched gets
its result; sessions whose kernels are gone fail; stray kernels are removed. A
session with kernels on an agent that does not answer is left to the liveness
check (``liveness``): lost after ``agent_lost_timeout``, or found again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from ...agents.base import AgentBackend, AgentError, KernelEvent, KernelEventKind, LiveKernel
from ...kernel_plan import LABEL_SCOPE
from ...model import (
    NOT_ENDED,
    STARTING,
    IllegalTransition,
    Session,
    SessionType,
    Status,
)
from ..core import Core, Settings
from ..lifecycle.start_stop import Lifecycle
from .hangs import HangWatch

__all__ = ["Reconciler"]

#: Seconds beyond ``start_timeout`` another manager gets to finish a start or tear-down.
HANDOVER = 10.0


@dataclass
class _Live:
    kernel: LiveKernel
    agent: AgentBackend


class Reconciler:
    """Brings the store and the agents back into agreement when the manager starts."""

    def __init__(
        self,
        core: Core,
        settings: Settings,
        lifecycle: Lifecycle,
        hangs: HangWatch | None = None,
    ) -> None:
        self.core = core
        self.settings = settings
        self.lifecycle = lifecycle
        #: A session stuck past its state's limit is forced out at once (hang-timeout).
        self.hangs = hangs
        #: Agents that did not answer at the last reconciliation: their sessions wait for
        #: them (reconciled when they answer, failed ``agent-lost`` if they never do).
        self.unreachable: set[str] = set()

    async def reconcile(self) -> None:
        """Match the store against what the agents really have."""
        core = self.core
        live: dict[str, _Live] = {}
        unreachable = self.unreachable
        unreachable.clear()
        for agent in core.agents.values():
            try:
                for kernel in await self._ours(agent):
                    live[kernel.kernel_id] = _Live(kernel, agent)
            except AgentError as exc:
                core.log.warning("bai-jupyter: agent %s unreachable: %s", agent.id, exc)
                unreachable.add(agent.id)
        known: set[str] = set()
        for session in await core.list_sessions(statuses=NOT_ENDED):
            if session.status is Status.PENDING:
                continue
            known.add(session.id)
            if not unreachable.intersection(k.agent_id for k in session.kernels):
                await self._session(session, live)
        for agent in core.agents.values():
            here = {e.kernel.session_id for e in live.values() if e.agent is agent}
            await self._remove_strays(agent, here - known)
        await self.lifecycle.multinode.sweep()

    async def _ours(self, agent: AgentBackend) -> list[LiveKernel]:
        """The agent's kernels of this store (another store's are not ours to judge)."""
        scope = self.core.require_store().id
        return [k for k in await agent.live_kernels() if k.labels.get(LABEL_SCOPE) == scope]

    async def _remove_strays(self, agent: AgentBackend, session_ids: set[str]) -> None:
        for session_id in sorted(session_ids):
            self.core.log.info(
                "bai-jupyter: removing stray kernels of session %s on %s", session_id, agent.id
            )
            await agent.destroy_session(session_id)

    async def sweep_agent(self, agent: AgentBackend) -> None:
        """Remove an agent's kernels of sessions that ended while it did not answer."""
        here = {k.session_id for k in await self._ours(agent)}
        alive = await self.core.list_sessions(statuses=NOT_ENDED)
        await self._remove_strays(agent, here - {s.id for s in alive})

    async def _session(
        self, session: Session, live: dict[str, _Live], recheck: bool = True
    ) -> None:
        lifecycle = self.lifecycle
        if session.status is Status.SCHEDULED:
            self.core.spawn(lifecycle.start(session.id))
            return
        if self.hangs is not None and self.hangs.overdue(session):
            await self.hangs.force(session)
            return
        if session.status in STARTING:
            # Only the store's leader starts sessions, and this process leads now: the one
            # that led before left this start half-way.
            self.core.spawn(lifecycle.take_over(session))
            return
        if recheck and session.status is Status.TERMINATING:
            # Any manager on this store (a replica, a server, a console kernel's embedded
            # one) ends sessions: one may be removing it right now: judge it only once that
            # manager has had its time, and only if it made no progress meanwhile.
            since = session.status_history[-1].at
            left = since + self.settings.start_timeout + HANDOVER - time.time()
            if left > 0:
                self.core.spawn(self._recheck(session, left), loop=True)
                return
        if session.status is Status.TERMINATING:
            await lifecycle.teardown(session, Status.TERMINATED, session.status_info)
            return
        found = [live.get(k.id) for k in session.kernels]
        if all(entry is not None and entry.kernel.running for entry in found):
            return  # still running: nothing to do
        main = session.main
        main_live = live.get(main.id)
        if (
            session.spec.type is SessionType.BATCH
            and main_live is not None
            and not main_live.kernel.running
            and main_live.kernel.exit_code is not None
        ):
            code = main_live.kernel.exit_code
            event = KernelEvent(KernelEventKind.EXITED, session.id, main.id, exit_code=code)
            await lifecycle.finish_batch(session, event)
            return
        gone = [k.hostname for k, e in zip(session.kernels, found) if e is None]
        await lifecycle.fail(session, "kernel-lost", ",".join(gone) or "main1", None)

    async def _recheck(self, seen: Session, delay: float) -> None:
        """Reconcile a starting or ending session after ``delay`` unless it moved on."""
        await asyncio.sleep(delay)
        session = await self.core.get(seen.id)
        if len(session.status_history) == len(seen.status_history):
            with contextlib.suppress(IllegalTransition):  # it moved on after all
                await self._session(session, {}, recheck=False)
