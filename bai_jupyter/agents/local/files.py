"""A local kernel's directory: its config and work dirs, log, and metadata file::

    <root>/<session_id>/<hostname>/
        config/             bootstrap.json (0600) and what the runtime writes
        work/               the working directory; data folders are symlinks here
        output.log          the kernel's stdout and stderr
        local-kernel.json   pid, ports, environment, exit code: for reconciliation

Session and kernel dirs are private (0700): they hold the kernel's Jupyter key.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from ...kernel_plan import KernelPlan
from ...mounts import Mount
from ..base import AgentError
from ..capped import DROPPED_MARK

__all__ = [
    "META_FILE",
    "default_root",
    "host_work_dir",
    "last_lines",
    "prepare_dirs",
    "read_metas",
    "read_tail",
    "remove_tree",
    "write_private",
]

#: Per-kernel metadata file, read back by a later agent.
META_FILE = "local-kernel.json"


def default_root() -> Path:
    """``<jupyter runtime dir>/bai_jupyter/local-kernels``: per user, private, transient."""
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir()) / "bai_jupyter" / "local-kernels"


def prepare_dirs(kdir: Path, boot: dict[str, Any], mounts: list[Mount]) -> None:
    """Private kernel dir, bootstrap.json, and data folders linked into the work dir."""
    kdir.parent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    kdir.parent.mkdir(exist_ok=True, mode=0o700)  # the session dir holds Jupyter keys
    kdir.mkdir(exist_ok=True, mode=0o700)
    config, work = kdir / "config", kdir / "work"
    config.mkdir(exist_ok=True, mode=0o700)
    work.mkdir(exist_ok=True)
    write_private(config / "bootstrap.json", json.dumps(boot, indent=1))
    for mount in mounts:
        name = Path(mount.target).name
        if not name or name in {".", ".."}:
            raise AgentError(f"data folder target {mount.target!r} has no usable name")
        source = Path(mount.source).expanduser().resolve()
        if not source.exists():  # none is created here: the manager makes data folders
            raise AgentError(f"cannot mount {source}: no such host path")
        link = work / name
        if link.is_symlink():
            link.unlink()
        elif link.exists():
            raise AgentError(f"cannot link data folder {source} at {link}: something is there")
        link.symlink_to(source, target_is_directory=True)


def host_work_dir(plan: KernelPlan) -> str | None:
    """The plan's working dir on this host: natively the mounted folder itself, no link."""
    if not plan.work_dir:
        return None
    wanted = PurePosixPath(plan.work_dir)
    for mount in plan.mounts:
        target = PurePosixPath(mount.target)
        if wanted == target or target in wanted.parents:
            return str(Path(mount.source, wanted.relative_to(target)))
    return None


def write_private(path: Path, text: str) -> None:
    """Write a file only the user can read (it may hold the Jupyter key)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    tmp.replace(path)


def read_metas(root: Path) -> list[tuple[dict[str, Any], Path]]:
    """Every kernel's metadata under ``root``, with its kernel dir (damaged files skipped)."""
    found: list[tuple[dict[str, Any], Path]] = []
    if not root.is_dir():
        return found
    for meta_file in sorted(root.glob(f"*/*/{META_FILE}")):
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict):
            found.append((meta, meta_file.parent))
    return found


def _read_tail_bytes(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(size - limit, 0))
            return file.read()
    except FileNotFoundError:
        return b""


def read_tail(path: Path, limit: int, lines: int | None = None) -> str:
    """A log's last ``lines`` lines (all: ``None``) within its last ``limit`` bytes, after
    :data:`DROPPED_MARK` when the byte limit cut what was asked (only the end is read)."""
    data = _read_tail_bytes(path, limit + 1)
    if lines is not None:
        end = len(data) - 1  # a newline at the very end ends the last line
        for _ in range(lines):
            end = data.rfind(b"\n", 0, end)
            if end < 0:
                break
        else:
            return data[end + 1 :].decode(errors="replace")
    if len(data) > limit:
        return DROPPED_MARK + data[-limit:].decode(errors="replace")
    return data.decode(errors="replace")


def last_lines(path: Path, count: int) -> bytes:
    """The last ``count`` lines of a log (within its last 4 KiB)."""
    return b"\n".join(_read_tail_bytes(path, 4096).splitlines()[-count:])


def remove_tree(path: Path) -> None:
    """Remove a kernel or session dir; symlinked data folders are unlinked, not followed."""

    def retry_writable(func: Callable[[str], object], name: str, exc: object) -> None:
        error = exc[1] if isinstance(exc, tuple) else exc  # onerror's exc_info, or onexc's
        if isinstance(error, FileNotFoundError):
            return  # removed meanwhile (a second tear-down of the same session): gone is gone
        # A read-only dir the user made: make it writable, retry (never chmod through a
        # symlink: that would change the data folder it points to).
        target = Path(name)
        with contextlib.suppress(OSError):
            target.parent.chmod(0o700)
            if not target.is_symlink() and target.is_dir():
                target.chmod(0o700)
        func(name)

    if not path.exists() and not path.is_symlink():
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry_writable)
    else:
        shutil.rmtree(path, onerror=retry_writable)
