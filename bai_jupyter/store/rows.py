"""Rows ↔ the model: how sessions, kernels, agents and templates are stored."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from ..model import (
    NOT_ENDED,
    OCCUPYING,
    Agent,
    Kernel,
    Session,
)
from ..request import Template, spec_to_json
from ..resources import ResourceSlot
from ..wire import kernel_to_json
from .tables import kernels_table

NOT_ENDED_VALUES = [s.value for s in NOT_ENDED]
OCCUPYING_VALUES = [s.value for s in OCCUPYING]


# --- row ↔ model ---------------------------------------------------------------------------


def agent_from_row(row: sa.Row[Any]) -> Agent:
    return Agent(
        id=row.id,
        capacity=ResourceSlot(row.capacity),
        occupied=ResourceSlot(row.occupied),
        resource_group=row.resource_group,
        backend=row.backend,
        address=row.address,
        schedulable=row.schedulable,
    )


#: A kernel's columns but its kept logs (up to a MiB each): read only by ``get_logs``.
KERNEL_COLUMNS = [c for c in kernels_table.c if c.name != "logs"]


def kernel_values(kernel: Kernel) -> dict[str, Any]:
    """Its row: the role column keeps ``main`` or ``sub`` (the hostname keeps the role's
    name)."""
    return {**kernel_to_json(kernel), "role": kernel.role.value, "session_id": kernel.session_id}


def session_values(session: Session, with_spec: bool = True) -> dict[str, Any]:
    """Its row; ``with_spec=False`` leaves out the spec (serializing it is the costly part)."""
    values = {
        "id": session.id,
        "owner": session.owner,
        "name": session.spec.name,
        "resource_group": session.spec.resource_group,
        "status": session.status.value,
        "status_info": session.status_info,
        "status_data": session.status_data,
        "result": session.result.value,
        "exit_code": session.exit_code,
        "created_at": session.created_at,
        "meta": session.meta,
    }
    if with_spec:
        values["spec"] = spec_to_json(session.spec)
    return values


def template_from_row(row: sa.Row[Any]) -> Template:
    return Template(
        name=row.name, spec=row.spec, description=row.description, owner=row.owner or None
    )


def chunks(items: list[str], size: int = 500) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
