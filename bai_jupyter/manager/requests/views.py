"""What a caller may see of the agents and the queue (the API's ``agents`` and ``scheduler``).

A caller sees every agent's numbers and the whole queue's length and order,
but the identity of other users' sessions only as an admin.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from ...model import Agent, KernelRole, Session, Status, name_sessions
from ...store import Transaction
from ..core import Core
from ..pools.config import warm_mark

__all__ = ["agents_view", "named_reasons", "queue_view"]

#: Sessions whose kernels hold slots on agents.
_HOLDING = [s for s in Status if s.occupies]


async def agents_view(core: Core, owner: str, admin: bool) -> list[dict[str, Any]]:
    """Every agent: capacity, occupied and free slots, the kernels on it, and how many
    warm sessions of each pool have their main1 there."""

    def read(tx: Transaction) -> tuple[list[Agent], list[Session]]:
        return tx.list_agents(), tx.list_sessions(statuses=_HOLDING, history=False)

    agents, sessions = await core.query(read)
    kernels: dict[str, list[dict[str, Any]]] = defaultdict(list)
    warm: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for session in sessions:
        visible = admin or session.owner == owner
        pool = warm_mark(session).get("pool")
        for kernel in session.kernels:
            if kernel.agent_id is None or not kernel.status.occupies:
                continue
            entry: dict[str, Any] = {"slots": kernel.slots.to_json()}
            if pool is not None:  # nobody's yet: which pool keeps it warm
                entry["pool"] = pool
                if kernel.role is KernelRole.MAIN:
                    warm[kernel.agent_id][str(pool)] += 1
            if visible:
                entry.update(
                    session_id=session.id,
                    kernel_id=kernel.id,
                    hostname=kernel.hostname,
                    owner=session.owner,
                    status=kernel.status.value,
                )
            kernels[kernel.agent_id].append(entry)
    return [
        {
            "id": agent.id,
            "resource_group": agent.resource_group,
            "backend": agent.backend,
            "schedulable": agent.schedulable,
            "capacity": agent.capacity.to_json(),
            "occupied": agent.occupied.to_json(),
            "free": (agent.capacity - agent.occupied).to_json(),
            "kernels": kernels.get(agent.id, []),
            "warm": dict(warm.get(agent.id, {})),
        }
        for agent in agents
    ]


def queue_view(
    queues: dict[str, list[Session]],
    settings: dict[str, dict[str, Any]],
    owner: str,
    admin: bool,
    passes: Mapping[str, dict[str, Any]],
) -> dict[str, Any]:
    """Per resource group: its scheduler settings, pending queue with why each waits, and
    how long its passes took."""
    reply = {}
    for name, conf in settings.items():
        queue = []
        for position, session in enumerate(queues.get(name, []), 1):
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
                    pending_reason=session.pending_reason,
                )
            queue.append(entry)
        reply[name] = {
            "sequencer": conf.get("sequencer", "fifo"),
            "selector": conf.get("selector", "concentrated"),
            "options": conf.get("options") or {},
            "pending": len(queue),
            "queue": queue,
            "passes": passes.get(name, {"passes": 0}),
        }
    return reply


async def named_reasons(core: Core, sessions: list[Session]) -> list[Session]:
    """``sessions`` with the sessions their why-pending record names (dependencies) read
    by name and status as they are now, not as the pass that wrote the record saw them.
    Another owner's session stays a short id (a name is not for everyone to see)."""
    wanted = {d for s in sessions if s.status is Status.PENDING for d in s.spec.depends_on}
    if not wanted:
        return sessions
    found = {s.id: s for s in sessions if s.id in wanted}

    def read(tx: Transaction) -> list[Session | None]:
        return [tx.get_session(key) for key in wanted - found.keys()]

    found.update((s.id, s) for s in await core.query(read) if s is not None)

    def resolve(session: Session) -> Session:
        record = session.scheduler_data
        if session.status is not Status.PENDING or not record:
            return session

        def known(key: str) -> tuple[str, str] | None:
            dep = found.get(key)
            if dep is None or dep.owner != session.owner:
                return None
            return dep.name or dep.id[:8], dep.status.value

        record = {
            **record,
            "msg": name_sessions(str(record.get("msg") or ""), known),
            "failed_predicates": [
                {**p, "msg": name_sessions(str(p.get("msg") or ""), known)}
                if isinstance(p, Mapping)
                else p
                for p in record.get("failed_predicates") or []
            ],
        }
        return dataclasses.replace(
            session, status_data={**session.status_data, "scheduler": record}
        )

    return [resolve(s) for s in sessions]
