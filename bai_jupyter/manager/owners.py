"""Owners that are no user: the manager's own sessions, and the one rule they follow.

The warm pools keep sessions for nobody yet (``POOL_OWNER``). Such an owner is
:func:`exempt`: no user's limits, idle rules or fair share apply to it (the pools'
sizes bound it, and a warm session waits for its user by design); no caller may
create a session as it; and everyone sees its sessions come and go.
"""

from __future__ import annotations

__all__ = ["POOL_OWNER", "exempt"]

#: The owner of every unclaimed warm session: no user (a name no login can take).
POOL_OWNER = "(warm pool)"


def exempt(owner: str) -> bool:
    """Whether ``owner`` is the manager's own, not a user: exempt from users' rules."""
    return owner == POOL_OWNER
