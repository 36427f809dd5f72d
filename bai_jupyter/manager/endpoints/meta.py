"""A replica session's mark: the endpoint it serves and the generation it was made for."""

from __future__ import annotations

from ...model import Session

__all__ = ["REPLICA_META", "endpoint_of", "replica_generation"]

#: The key of a replica session's ``meta``: ``{"id", "name", "generation"}`` of its endpoint.
REPLICA_META = "endpoint"


def replica_generation(session: Session) -> int:
    return int(session.meta.get(REPLICA_META, {}).get("generation", 0))


def endpoint_of(session: Session) -> str | None:
    """The endpoint id a session is a replica of, if any."""
    found = session.meta.get(REPLICA_META)
    return str(found["id"]) if isinstance(found, dict) and "id" in found else None
