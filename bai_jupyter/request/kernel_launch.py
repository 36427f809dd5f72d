"""The session request a bai kernelspec launches: its provisioner config, less what is not
a request field.

One function for the provisioner (its traits), ``bai-jupyter kernelspec install``
(the config it writes) and the warm pools (a pool named by its kernelspec), so all
three ask for the same session; and what a launch attached to a session that ended
says (the provisioner, and the server for a kernelspec it removed as the session ended).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import Unavailable
from ..model import Session

__all__ = ["PROVISIONER_ONLY", "ended_error", "ended_text", "launch_request"]

#: Provisioner settings that are not fields of a session request.
PROVISIONER_ONLY = ("template", "launch_timeout", "session", "mount_notebook_dir")


def launch_request(config: Mapping[str, Any]) -> dict[str, Any]:
    """An interactive request of the fields ``config`` sets (``None`` and empty ones are
    left to the template and the defaults)."""
    request: dict[str, Any] = {"type": "interactive"}
    for name, value in config.items():
        if name not in PROVISIONER_ONLY and value is not None and value not in ([], {}):
            request[name] = value
    return request


def ended_text(name: str, why: str) -> str:
    """A launch on the attach kernelspec of session ``name``, which ended (``why``: its
    status_info): one line, no log (nothing in it is news), and what to do."""
    return f"session {name} has ended ({why}); start a new one"


def ended_error(session: Session) -> Unavailable:
    """:func:`ended_text` of ``session`` (503)."""
    why = session.status_info or session.status.value
    return Unavailable(ended_text(session.name or session.id, why))
