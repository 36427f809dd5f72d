"""The session request a bai kernelspec launches: its provisioner config, less what is not
a request field.

One function for the provisioner (its traits), ``bai-jupyter kernelspec install``
(the config it writes) and the warm pools (a pool named by its kernelspec), so all
three ask for the same session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PROVISIONER_ONLY", "launch_request"]

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
