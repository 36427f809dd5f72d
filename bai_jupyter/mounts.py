"""Data folders and host paths a session mounts, and the operator's policy on which are allowed."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from .runtime.protocol import WORK_DIR


@dataclass(frozen=True)
class Mount:
    """A data folder: a host directory mounted at the same path in every kernel."""

    source: str
    target: str
    read_only: bool = False
    #: A named data folder of the owner's (``<folders_root>/<owner>/<name>``), not a host path.
    folder: bool = False


def owner_dir(owner: str) -> str:
    """The owner's directory name under the data-folder root, escaped.

    A crafted owner name ("..", "a/b", "") must not reach another user's folders."""
    name = quote(owner, safe="@+-_.") or "%00"
    return "%2E" + name[1:] if name.startswith(".") else name


_FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def parse_mount(entry: str, owner: str, folders_root: Path) -> Mount:
    """A ``mounts`` entry: a data folder name, or ``/host/path[:/target]``, then ``:ro``.

    A named folder is ``<folders_root>/<owner>/<name>``; everything is mounted
    under ``WORK_DIR`` unless a target is given.
    """
    parts = entry.split(":")
    read_only = parts[-1] == "ro"
    if read_only or parts[-1] == "rw":
        parts = parts[:-1]
    if not parts or len(parts) > 2 or not parts[0]:
        raise ValueError(f"{entry!r}: use NAME, /host/path or /host/path:/target, then :ro")
    source = parts[0]
    if source.startswith("/"):
        name = PurePosixPath(source).name or "root"
    elif _FOLDER_NAME.fullmatch(source) and len(parts) == 1:
        name = source
        source = str(folders_root / owner_dir(owner) / name)
    else:
        raise ValueError(f"{entry!r}: a folder name is letters, digits, '.', '_' and '-'")
    target = parts[1] if len(parts) == 2 else f"{WORK_DIR}/{name}"
    if not target.startswith("/") or ".." in PurePosixPath(target).parts:
        raise ValueError(f"{entry!r}: the target must be an absolute path without '..'")
    return Mount(source, target, read_only, folder=not parts[0].startswith("/"))


#: Never mountable, even under an allowed prefix, nor anything that contains them: the
#: kernel interfaces of the host and the container engines' sockets and state (root).
ALWAYS_FORBIDDEN = (
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/run/docker.sock",
    "/run/containerd",
    "/var/run/docker.sock",
)


class MountRefused(ValueError):
    """A mount the policy does not allow; the message says which rule refused it."""


def _within(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


@dataclass(frozen=True)
class MountPolicy:
    """Which host directories a session may mount (the operator's allow-list).

    Every path is resolved (symlinks, ``..``) before it is checked. A named data folder
    is allowed inside its owner's directory; a host path only under an allowed prefix
    (``/prefix`` or ``/prefix:ro``, the latter forcing read-only). Never, even under an
    allowed prefix: a forbidden path (the engine's socket, the store, the server's
    dirs …), anything inside one, or anything containing one (mounting ``/`` would
    reach the Docker socket); nor another user's data folders or their common root.
    """

    allowed: tuple[tuple[str, bool], ...]
    forbidden: tuple[str, ...]
    folders_root: str

    @classmethod
    def build(
        cls, allowed: Iterable[str], forbidden: Iterable[str | Path], folders_root: str | Path
    ) -> MountPolicy:
        """``allowed``: ``/prefix`` or ``/prefix:ro``; ``forbidden`` adds to ALWAYS_FORBIDDEN."""
        prefixes = []
        for entry in allowed:
            path, _, flag = entry.partition(":")
            if not path.startswith("/") or flag not in ("", "ro", "rw"):
                raise ValueError(f"allowed_host_paths: {entry!r}: use /prefix or /prefix:ro")
            prefixes.append((os.path.realpath(path), flag == "ro"))
        paths = {os.path.normpath(p) for p in ALWAYS_FORBIDDEN}
        paths |= {os.path.normpath(str(p)) for p in forbidden if str(p)}
        paths |= {os.path.realpath(p) for p in list(paths)}
        return cls(tuple(prefixes), tuple(sorted(paths)), os.path.realpath(folders_root))

    def check(self, mount: Mount, owner: str) -> Mount:
        """The mount with its source resolved (and read-only where forced); else refused."""
        try:
            real = os.path.realpath(mount.source)
        except OSError as exc:  # e.g. a /proc link it may not follow
            raise MountRefused(f"{mount.source}: cannot be resolved ({exc.strerror})") from exc
        mine = str(Path(self.folders_root) / owner_dir(owner))
        shown = mount.source if real == mount.source else f"{mount.source} (resolves to {real})"
        if _within(real, self.folders_root):
            if not _within(real, mine) or (real == mine and mount.folder):
                raise MountRefused(f"{shown}: another user's data folders are not mountable")
        elif _within(self.folders_root, real):
            raise MountRefused(f"{shown}: contains every user's data folders")
        elif mount.folder:
            raise MountRefused(f"{shown}: a data folder must stay inside {mine}")
        for bad in self.forbidden:
            if _within(bad, real):
                raise MountRefused(f"{shown}: contains {bad}, which is never mountable")
            if _within(real, bad) and not _within(real, mine):
                raise MountRefused(f"{shown}: inside {bad}, which is never mountable")
        read_only = mount.read_only
        if not _within(real, mine):
            prefix = next((p for p in self.allowed if _within(real, p[0])), None)
            if prefix is None:
                allowed = ", ".join(p for p, _ in self.allowed) or "none configured"
                raise MountRefused(
                    f"{shown}: host paths must be under "
                    f"BaiSessionManager.allowed_host_paths ({allowed})"
                )
            read_only = read_only or prefix[1]
        return Mount(real, mount.target, read_only, mount.folder)
