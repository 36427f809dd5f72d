"""The JSON form of a session, shared by the REST API and its client.

One function each way, so the server, the remote client (``client.py``) and the
front ends agree on one shape; :func:`session_from_json` reads back exactly what
:func:`session_to_json` writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from .model import HistoryEntry, Kernel, KernelRole, Session, SessionResult, Status, StatusData
from .request import parse_spec, spec_to_json
from .resources import ResourceSlot

__all__ = ["kernel_from_json", "kernel_to_json", "session_from_json", "session_to_json"]


def kernel_to_json(kernel: Kernel) -> dict[str, Any]:
    """Every fact of ``kernel`` but its session id (the store's row adds that); ``role`` is
    its role's name (``main``, ``sub``, or the role the request named, e.g. ``worker``),
    as its container's label and ``BACKENDAI_CLUSTER_ROLE`` say."""
    return {
        "id": kernel.id,
        "hostname": kernel.hostname,
        "role": kernel.role_name,
        "cluster_idx": kernel.cluster_idx,
        "slots": kernel.slots.to_json(),
        "status": kernel.status.value,
        "status_info": kernel.status_info,
        "agent_id": kernel.agent_id,
        "container_id": kernel.container_id,
        "info": kernel.info,
    }


def session_to_json(session: Session) -> dict[str, Any]:
    """Every fact of ``session``, JSON-ready (the REST API adds proxy URLs on top), and
    ``pending_reason``: the one sentence, built from ``status_data["scheduler"]``, that
    every front end shows for why it waits."""
    return {
        "id": session.id,
        "name": session.name,
        "owner": session.owner,
        "created_at": session.created_at,
        "status": session.status.value,
        "status_info": session.status_info,
        "status_data": session.status_data,
        "pending_reason": session.pending_reason,
        "status_history": [entry.to_json() for entry in session.status_history],
        "result": session.result.value,
        "exit_code": session.exit_code,
        "spec": spec_to_json(session.spec),
        "kernels": [kernel_to_json(k) for k in session.kernels],
        "meta": session.meta,
    }


def kernel_from_json(session_id: str, data: Mapping[str, Any]) -> Kernel:
    """A :class:`Kernel` from :func:`kernel_to_json`'s output (or a store row of it)."""
    return Kernel(
        id=data["id"],
        session_id=session_id,
        role=KernelRole.MAIN if data["role"] == KernelRole.MAIN.value else KernelRole.SUB,
        cluster_idx=int(data["cluster_idx"]),
        hostname=data["hostname"],
        slots=ResourceSlot(data["slots"]),
        status=Status(data["status"]),
        status_info=data.get("status_info"),
        agent_id=data.get("agent_id"),
        container_id=data.get("container_id"),
        info=dict(data.get("info") or {}),
    )


def session_from_json(data: dict[str, Any]) -> Session:
    """A :class:`Session` from :func:`session_to_json`'s output (extra keys are ignored)."""
    return Session(
        id=data["id"],
        owner=data["owner"],
        spec=parse_spec(data["spec"], bounded=False),
        created_at=float(data["created_at"]),
        status=Status(data["status"]),
        status_info=data.get("status_info"),
        status_data=cast(StatusData, dict(data.get("status_data") or {})),
        status_history=[
            HistoryEntry(Status(h["status"]), float(h["at"]), h.get("info"))
            for h in data.get("status_history") or []
        ],
        result=SessionResult(data.get("result", SessionResult.UNDEFINED.value)),
        exit_code=data.get("exit_code"),
        kernels=[kernel_from_json(data["id"], k) for k in data.get("kernels") or []],
        meta=dict(data.get("meta") or {}),
    )
