"""Agents' records in one transaction: capacity, and slots reserved by their kernels."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..model import Agent
from ..resources import ResourceSlot
from .rows import OCCUPYING_VALUES, agent_from_row
from .tables import agents_table, kernels_table


class AgentRecords:
    """The agents the manager registered, by id."""

    conn: Connection
    changed: bool

    def list_agents(self, resource_group: str | None = None) -> list[Agent]:
        query = sa.select(agents_table).order_by(agents_table.c.id)
        if resource_group is not None:
            query = query.where(agents_table.c.resource_group == resource_group)
        return [agent_from_row(row) for row in self.conn.execute(query)]

    def put_agent(self, agent: Agent) -> None:
        """Register or update an agent; its reservations are recomputed from its kernels."""
        occupied = ResourceSlot()
        for kernel in self.conn.execute(
            sa.select(kernels_table.c.slots).where(
                kernels_table.c.agent_id == agent.id, kernels_table.c.status.in_(OCCUPYING_VALUES)
            )
        ):
            occupied = occupied + ResourceSlot(kernel.slots)
        values = {
            "id": agent.id,
            "resource_group": agent.resource_group,
            "backend": agent.backend,
            "address": agent.address,
            "capacity": agent.capacity.to_json(),
            "occupied": occupied.to_json(),
            "schedulable": agent.schedulable,
        }
        found = self.conn.execute(sa.select(agents_table).where(agents_table.c.id == agent.id))
        row = found.first()
        if row is None or row._asdict() != values:
            self.changed = True  # room made or taken; a heartbeat that changes nothing is not
        if row is not None:
            self.conn.execute(
                sa.update(agents_table).where(agents_table.c.id == agent.id).values(values)
            )
        else:
            self.conn.execute(sa.insert(agents_table), [values])
