"""What a session's change says to those who follow the event stream.

The store writes one such event with every change of a session, in the same
transaction (``store.events``), so every process on the store sees every change,
in the order they were made, whoever made it.
"""

from __future__ import annotations

import time
from typing import Any

from .records import Session

__all__ = ["session_event"]


def session_event(session: Session, **extra: Any) -> dict[str, Any]:
    """The event that says a session changed (what the API's event stream carries)."""
    return {
        "type": "session",
        "session_id": session.id,
        "name": session.name,
        "owner": session.owner,
        "status": session.status.value,
        "status_info": session.status_info,
        "kernels": {k.hostname: k.status.value for k in session.kernels},
        "at": time.time(),
        **extra,
    }
