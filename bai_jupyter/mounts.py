"""Data folders and host paths a session mounts, and the operator's policy on which are allowed."""

from __future__ import annotations

import contextlib
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


def _below(path: str, top: str) -> bool:
    """Strictly inside ``top``: a component between them could be renamed by whoever writes
    ``top``."""
    return path != top and _within(path, top)


def parse_prefixes(entries: Iterable[str]) -> list[tuple[str, bool]]:
    """``allowed_host_paths`` as ``(normalised path, read-only)``, or ValueError.

    A prefix strictly inside a read-write one is refused: a kernel that mounts the outer
    one can swap a component of the inner one for a symlink before a session mounting it
    starts (the engine resolves the path again then), so the inner one could never be
    mounted safely."""
    prefixes = []
    for entry in entries:
        path, _, flag = entry.partition(":")
        if not path.startswith("/") or flag not in ("", "ro", "rw"):
            raise ValueError(f"allowed_host_paths: {entry!r}: use /prefix or /prefix:ro")
        prefixes.append((os.path.normpath(path), flag == "ro"))
    for inner, _ in prefixes:
        outer = next((p for p, ro in prefixes if not ro and _below(inner, p)), None)
        if outer is not None:
            raise ValueError(
                f"allowed_host_paths: {inner} is inside the read-write prefix {outer}: a "
                f"kernel that mounts {outer} could replace a directory on the way with a "
                f"symlink before a session mounting {inner} starts; drop {inner}, or write "
                f"'{outer}:ro'"
            )
    return prefixes


def make_folder(folders_root: str | Path, owner: str, name: str) -> None:
    """Create ``<root>/<owner>/<name>`` without following a symlink on the way (blocking).

    MountRefused when the owner's directory or the folder is not a directory of its own
    (a symlink, a file): the engine would bind whatever it points to."""
    Path(folders_root).mkdir(parents=True, exist_ok=True)  # the operator's path
    fd = os.open(folders_root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in (owner_dir(owner), name):
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=fd)
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise MountRefused(
                    f"data folder {name}: {part} in {folders_root} is not a directory of its "
                    f"own ({exc.strerror}); ask the operator to remove it"
                ) from exc
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


@dataclass(frozen=True)
class MountPolicy:
    """Which host directories a session may mount (the operator's allow-list).

    Every path is resolved (symlinks, ``..``) before it is checked, and the resolved path
    is what the engine gets. The engine resolves it again when the container starts, so
    no path is accepted that a kernel or a user could change in between: nothing inside
    the data-folder root but a named folder (``<root>/<owner>/<name>``, components only
    the manager makes), nothing strictly inside a directory kernels write (a read-write
    prefix, the mounted notebook root). A host path must lie under an allowed prefix
    (``/prefix`` or ``/prefix:ro``; under a read-only prefix every mount is read-only, so
    no kernel writes there). Never, even for an admin: a forbidden path (the engine's
    socket, the store, the server's dirs …), anything inside one, or anything containing
    one (mounting ``/`` would reach the Docker socket); nor a read-write mount that
    contains a directory sessions mount (a kernel could swap it).
    """

    allowed: tuple[tuple[str, bool], ...]
    forbidden: tuple[str, ...]
    folders_root: str
    #: Directories kernels may write in: the read-write prefixes and the notebook root.
    writable: tuple[str, ...] = ()

    @classmethod
    def build(
        cls,
        allowed: Iterable[str],
        forbidden: Iterable[str | Path],
        folders_root: str | Path,
        writable: Iterable[str] = (),
    ) -> MountPolicy:
        """``allowed``: ``/prefix`` or ``/prefix:ro``; ``forbidden`` adds to ALWAYS_FORBIDDEN;
        ``writable``: more directories kernels write in (the notebook root)."""
        prefixes = [(os.path.realpath(p), ro) for p, ro in parse_prefixes(allowed)]
        paths = {os.path.normpath(p) for p in ALWAYS_FORBIDDEN}
        paths |= {os.path.normpath(str(p)) for p in forbidden if str(p)}
        paths |= {os.path.realpath(p) for p in list(paths)}
        tops = {p for p, ro in prefixes if not ro} | {os.path.realpath(w) for w in writable}
        return cls(
            tuple(prefixes),
            tuple(sorted(paths)),
            os.path.realpath(folders_root),
            tuple(sorted(tops)),
        )

    def check(self, mount: Mount, owner: str, any_host_path: bool = False) -> Mount:
        """The mount with its source resolved (and read-only where forced); else refused.

        ``any_host_path``: no allow-list (an admin's request, the operator's notebook
        root); every other rule holds."""
        try:
            real = os.path.realpath(mount.source)
        except OSError as exc:  # e.g. a /proc link it may not follow
            raise MountRefused(f"{mount.source}: cannot be resolved ({exc.strerror})") from exc
        shown = mount.source if real == mount.source else f"{mount.source} (resolves to {real})"
        if mount.folder:
            self._check_folder(mount, real, owner)
        else:
            self._check_data_folders(real, shown, owner)
        for bad in self.forbidden:
            if _within(bad, real):
                raise MountRefused(f"{shown}: contains {bad}, which is never mountable")
            if _within(real, bad) and not mount.folder:
                raise MountRefused(f"{shown}: inside {bad}, which is never mountable")
        asked = os.path.normpath(mount.source)  # what a remote engine resolves on its host
        for top in () if mount.folder else self.writable:
            if _below(real, top) or _below(asked, top):
                raise MountRefused(
                    f"{shown}: inside {top}, which kernels may write: a kernel could swap a "
                    "directory on this path for a symlink before the session starts, so "
                    f"only {top} itself is mountable there (or, for an allowed prefix, the "
                    f"operator makes it read-only: '{top}:ro')"
                )
        read_only = mount.read_only
        if not mount.folder:
            inside = [p for p in self.allowed if _within(real, p[0])]
            prefix = max(inside, key=lambda p: len(p[0]), default=None)  # the closest
            if prefix is None and not any_host_path:
                allowed = ", ".join(p for p, _ in self.allowed) or "none configured"
                raise MountRefused(
                    f"{shown}: host paths must be under "
                    f"BaiSessionManager.allowed_host_paths ({allowed})"
                )
            # Below a read-only prefix: read-only, but for the notebook root (kernels write
            # there by design, so nothing inside it is mountable).
            read_only = read_only or (
                prefix is not None and prefix[1] and real not in self.writable
            )
        if not read_only:  # what sessions mount (and is mountable): not swappable from here
            for top in (*self.writable, *(p for p, _ in self.allowed)):
                if _below(top, real) and not any(_below(top, w) for w in self.writable):
                    raise MountRefused(
                        f"{shown}: contains {top}, which sessions mount: a kernel writing "
                        "here could swap it for a symlink; mount it read-only (':ro')"
                    )
        return Mount(real, mount.target, read_only, mount.folder)

    def _check_folder(self, mount: Mount, real: str, owner: str) -> None:
        """A named folder is exactly ``<root>/<owner>/<name>``, no symlink on the way."""
        name = PurePosixPath(mount.source).name
        mine = PurePosixPath(self.folders_root, owner_dir(owner))
        if real != str(mine / name):
            raise MountRefused(
                f"data folder {name}: {mount.source} resolves to {real}; a data folder "
                f"must be a directory of its own in {mine}, not a symlink"
            )

    def _check_data_folders(self, real: str, shown: str, owner: str) -> None:
        """A host path is never in the data folders: a kernel writes in its own folders."""
        root = self.folders_root
        if _within(root, real):
            raise MountRefused(f"{shown}: contains every user's data folders")
        if _within(real, root):
            parts = PurePosixPath(real).relative_to(root).parts
            if parts[0] != owner_dir(owner):
                raise MountRefused(f"{shown}: another user's data folders are not mountable")
            hint = f'"{parts[1]}"' if len(parts) > 1 else "each by its name"
            raise MountRefused(
                f"{shown}: a host path inside your data folders is not mountable (a kernel "
                "could swap a directory on it for a symlink before the session starts): "
                f"name the folder instead, {hint}"
            )
