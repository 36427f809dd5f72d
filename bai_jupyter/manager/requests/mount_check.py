"""Which host directories a session gets: its data folders, allowed host paths, the notebooks.

Blocking (paths are resolved on disk): callers run these in a thread.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Final, Protocol

from jupyter_core.paths import (
    jupyter_config_path,
    jupyter_data_dir,
    jupyter_path,
    jupyter_runtime_dir,
)

from ...agents.base import RUNTIME_DIR, AgentBackend, kernel_packages
from ...model import Session
from ...mounts import Mount, MountPolicy, MountRefused, make_folder, parse_mount
from ...runtime.protocol import NOTEBOOK_DIR, WORK_DIR
from ..core import Core

__all__ = ["ADMIN_MOUNTS", "MountCheck"]

#: In a session's ``status_data``: it was admitted with an admin's right to any host path.
ADMIN_MOUNTS: Final = "admin_mounts"


class MountSettings(Protocol):
    @property
    def allowed_host_paths(self) -> list[str]: ...

    @property
    def data_folders_root(self) -> str: ...

    @property
    def notebook_root(self) -> str | None: ...


def _nested(a: PurePosixPath, b: PurePosixPath) -> bool:
    """Whether one path is the other or inside it."""
    return a == b or a in b.parents or b in a.parents


class MountCheck:
    """The operator's mount policy applied to a session's ``mounts`` and notebook dir."""

    def __init__(self, core: Core, settings: MountSettings) -> None:
        self.core = core
        self.settings = settings

    def folders_root(self) -> Path:
        """Where named data folders live: ``<root>/<owner>/<name>``."""
        if self.settings.data_folders_root:
            return Path(self.settings.data_folders_root)
        return Path(jupyter_data_dir()) / "bai_jupyter" / "folders"

    def policy(self) -> MountPolicy:
        """The allow-list, what is never mountable, and what kernels write in.

        The notebook root counts as written by kernels when it is itself mountable (every
        kernel of a notebook gets it read-write): nothing strictly inside it is mounted."""
        # Whatever the server runs or reads as code or config (its Python environment,
        # Jupyter's config and data paths, what kernels get of ours): a kernel writing
        # there runs code on the host.
        forbidden: list[str | Path] = [
            jupyter_runtime_dir(),
            *jupyter_path(),
            *jupyter_config_path(),
            sys.prefix,
            *kernel_packages(),
            RUNTIME_DIR,
        ]
        store = self.core.store
        database = store.engine.url.database if store is not None else None
        sqlite = store is not None and store.engine.dialect.name == "sqlite"
        if sqlite and database and database != ":memory:":
            forbidden.append(Path(database).resolve().parent)
        for agent in self.core.agents.values():
            forbidden.extend(agent.private_paths())
        allowed, root = self.settings.allowed_host_paths, self.settings.notebook_root
        policy = MountPolicy.build(allowed, forbidden, self.folders_root(), [root] if root else [])
        if root:
            try:
                policy.check(Mount(root, NOTEBOOK_DIR), "", any_host_path=True)
            except MountRefused:  # never mounted, so no kernel writes there
                policy = MountPolicy.build(allowed, forbidden, self.folders_root())
        return policy

    def resolve(
        self, entries: Iterable[str], owner: str, create: bool, any_host_path: bool = False
    ) -> list[Mount]:
        """Parse and check ``mounts``; with ``create``, make the owner's named folders.

        Only a named folder of the owner's is ever created, never through a symlink; a
        host path must exist. ``any_host_path``: any host path passes the allow-list (an
        admin's request); every other rule holds."""
        entries = list(entries)
        if not entries:
            return []
        policy = self.policy()
        checked = []
        for entry in entries:
            mount = parse_mount(entry, owner, self.folders_root())
            mount = policy.check(mount, owner, any_host_path)
            if mount.folder:
                if create:
                    make_folder(self.folders_root(), owner, PurePosixPath(mount.source).name)
                    # Created now: check again what it resolves to (nothing swapped in).
                    mount = policy.check(mount, owner)
            elif not Path(mount.source).exists():
                raise MountRefused(f"{mount.source}: no such host path (none is created)")
            checked.append(mount)
        return checked

    def notebook_mount(
        self, session: Session, agent: AgentBackend, taken: Iterable[str]
    ) -> tuple[Mount | None, str | None]:
        """The notebook root's mount and the kernels' working dir (the notebook's folder).

        ``(None, None)`` when the session names no notebook dir, none is configured,
        the agent cannot see this host's files, or the policy refuses the root (e.g.
        ``/``, or a dir holding the store): said in the log, and the kernels start in
        WORK_DIR without it."""
        wanted = session.meta.get("notebook_dir")
        root = self.settings.notebook_root
        if not isinstance(wanted, str) or not wanted or not root:
            return None, None
        log = self.core.log
        skip = "bai-jupyter: session %s: notebook dir %s not mounted (kernels start in %s): %s"
        if not agent.shares_host_files:
            why = f"agent {agent.id} does not share this host's file system"
            log.info(skip, session.id, root, WORK_DIR, why)
            return None, None
        target = PurePosixPath(NOTEBOOK_DIR)
        clash = next((t for t in map(PurePosixPath, taken) if _nested(t, target)), None)
        if clash is not None:  # one inside the other: the engine would make dirs in a source
            log.warning(skip, session.id, root, WORK_DIR, f"a mount uses {clash}")
            return None, None
        try:
            if not Path(root).is_dir():
                raise MountRefused(f"{root}: not a directory")
            mount = self.policy().check(Mount(root, NOTEBOOK_DIR), session.owner, True)
        except (ValueError, OSError) as exc:
            log.warning(skip, session.id, root, WORK_DIR, exc)
            return None, None
        relative = Path(os.path.relpath(os.path.realpath(wanted), mount.source))
        if relative.parts and relative.parts[0] == "..":
            return mount, NOTEBOOK_DIR  # a notebook outside the root: start at the root
        return mount, str(PurePosixPath(NOTEBOOK_DIR, *relative.parts))
