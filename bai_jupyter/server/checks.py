"""Checks the API makes of a session before acting on it."""

from __future__ import annotations

from ..errors import Conflict, Unavailable
from ..model import Session, Status

__all__ = ["require_running"]


def require_running(session: Session, also: frozenset[Status] = frozenset()) -> None:
    """409 for a session that has ended (it never runs again), 503 while it is not RUNNING yet."""
    if session.status is Status.RUNNING or session.status in also:
        return
    if session.status.is_terminal or session.status is Status.TERMINATING:
        raise Conflict(f"session {session.id} has ended ({session.status.value})")
    raise Unavailable(f"session {session.id} is {session.status.value}, not RUNNING")
