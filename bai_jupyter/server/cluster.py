"""``/bai/api/v1/agents`` and ``…/scheduler``: capacity, occupancy and the pending queue.

A user sees every agent's numbers and the whole queue's length and order, but
the identity of other users' sessions only with the admin resource.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..errors import Unavailable
from ..model import Session, Status
from ..scheduler.context import PassContext
from ..scheduler.placement import AgentPool
from ..scheduler.queue import load_snapshot
from ..scheduler.sequencers import Sequencer
from ..store import Transaction
from .base import BaiHandler

__all__ = ["AgentsHandler", "SchedulerHandler", "queue_order"]

#: Sessions whose kernels hold slots on agents.
_HOLDING = [s for s in Status if s.occupies]


def queue_order(
    tx: Transaction, group: str, config: Any, sequencer: Sequencer, now: float
) -> list[Session]:
    """A group's pending sessions in the order the next pass will try them.

    Priority bands first (highest first), each in its sequencer's order, from
    the same snapshot a pass reads.
    """
    snapshot = load_snapshot(tx, group)
    ctx = PassContext(now, config, snapshot, AgentPool(snapshot.agents).capacity)
    bands: dict[int, list[Session]] = defaultdict(list)
    for session in snapshot.pending:
        bands[session.spec.priority].append(session)
    return [s for p in sorted(bands, reverse=True) for s in sequencer.order(bands[p], ctx)]


class AgentsHandler(BaiHandler):
    """Every agent: capacity, occupied and free slots, and the kernels on it."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        admin = await self.is_admin()
        owner = self.owner

        def read(tx: Transaction) -> tuple[list[Any], list[Session]]:
            return tx.list_agents(), tx.list_sessions(statuses=_HOLDING, history=False)

        agents, sessions = await self.db(read)
        kernels: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for session in sessions:
            visible = admin or session.owner == owner
            for kernel in session.kernels:
                if kernel.agent_id is None or not kernel.status.occupies:
                    continue
                entry: dict[str, Any] = {"slots": kernel.slots.to_json()}
                if visible:
                    entry.update(
                        session_id=session.id,
                        kernel_id=kernel.id,
                        hostname=kernel.hostname,
                        owner=session.owner,
                        status=kernel.status.value,
                    )
                kernels[kernel.agent_id].append(entry)
        self.write_json(
            {
                "agents": [
                    {
                        "id": agent.id,
                        "resource_group": agent.resource_group,
                        "backend": agent.backend,
                        "schedulable": agent.schedulable,
                        "capacity": agent.capacity.to_json(),
                        "occupied": agent.occupied.to_json(),
                        "free": (agent.capacity - agent.occupied).to_json(),
                        "kernels": kernels.get(agent.id, []),
                    }
                    for agent in agents
                ]
            }
        )


class SchedulerHandler(BaiHandler):
    """Per resource group: its scheduler settings and pending queue, with why each waits."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        admin = await self.is_admin()
        owner = self.owner
        if self.manager.store is None:
            raise Unavailable("the session manager is not started")
        groups: dict[str, Any] = dict(self.manager.resource_groups)
        now = time.time()
        plugins = {name: self.manager.group_scheduler(name) for name in groups}

        def read(tx: Transaction) -> dict[str, list[Session]]:
            return {
                name: queue_order(tx, name, config, sequencer, now)
                for name, (config, sequencer, _) in plugins.items()
            }

        queues = await self.db(read)
        reply = {}
        for name, conf in groups.items():
            queue = []
            for position, session in enumerate(queues[name], 1):
                entry: dict[str, Any] = {"position": position, "mine": session.owner == owner}
                if admin or session.owner == owner:
                    entry.update(
                        session_id=session.id,
                        name=session.name,
                        owner=session.owner,
                        priority=session.spec.priority,
                        created_at=session.created_at,
                        resources=session.spec.resources.to_json(),
                        cluster_size=session.spec.cluster_size,
                        scheduler=session.scheduler_data,
                    )
                queue.append(entry)
            reply[name] = {
                "sequencer": conf.get("sequencer", "fifo"),
                "selector": conf.get("selector", "concentrated"),
                "options": conf.get("options") or {},
                "pending": len(queue),
                "queue": queue,
            }
        self.write_json({"resource_groups": reply})
