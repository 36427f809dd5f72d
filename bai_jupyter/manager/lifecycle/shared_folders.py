"""Whether agents see the data folders: one file system mounted at the same path on each.

A session spread over several agents mounts its named data folders on every
one of them, so ``<data_folders_root>`` must be one shared file system (NFS or
similar) at the same path everywhere. The check is a marker file with a random
token at the root (``.bai-jupyter-shared``; no owner's directory starts with a
dot): an agent that reads the same token sees the same directory. Results are
kept for a minute per agent.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Iterable
from pathlib import Path

from ...agents.base import AgentBackend, AgentError
from ...agents.multinode import MultiNodeAgent
from ..core import Core

__all__ = ["MARKER", "SharedFolders"]

MARKER = ".bai-jupyter-shared"
#: Seconds an agent's positive answer is trusted.
_TRUSTED_FOR = 60.0


def _token(root: Path) -> bytes:
    """The root's marker token, written once (blocking)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / MARKER
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return path.read_bytes()
    token = secrets.token_hex(16).encode()
    with os.fdopen(fd, "wb") as file:
        file.write(token)
    return token


class SharedFolders:
    """Checks that agents see this manager's data-folder root."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self._seen: dict[tuple[str, str], float] = {}

    async def check(self, root: Path, agents: Iterable[AgentBackend], image: str) -> None:
        """AgentError naming the agents that do not see ``root`` (the same directory)."""
        token = await asyncio.to_thread(_token, root)
        marker = str(root / MARKER)
        blind: list[str] = []
        for agent in agents:
            key = (agent.id, str(root))
            if time.monotonic() - self._seen.get(key, -_TRUSTED_FOR) < _TRUSTED_FOR:
                continue
            if isinstance(agent, MultiNodeAgent):
                try:
                    sees = await agent.read_host_file(marker, image) == token
                except AgentError as exc:
                    blind.append(f"{agent.id} ({exc})")
                    continue
            else:
                sees = agent.shares_host_files
            if sees:
                self._seen[key] = time.monotonic()
            else:
                blind.append(agent.id)
        if blind:
            raise AgentError(
                f"the data folders under {root} are not the same directory on agent "
                f"{', '.join(blind)}: a session spread over several agents mounts them on "
                f"each, so mount one shared file system (NFS or similar) at {root} on every "
                "agent"
            )
