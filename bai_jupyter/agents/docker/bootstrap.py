"""How the runtime's instructions (and the runtime) get into a kernel's container.

Each container gets ``/home/config/bootstrap.json``: on a local engine a private
host file bind-mounted read-only (removed with the session), on a remote one
copied in by ``put_archive`` before start, with the runtime itself and, for a main
kernel, this package (``%bai``; :func:`package_archive`). The rest of
``/home/config`` stays writable (ipykernel rewrites its connection file there).
"""

from __future__ import annotations

import compileall
import functools
import io
import json
import os
import py_compile
import tarfile
import time
from pathlib import Path
from typing import Any

from ...runtime.protocol import RUNTIME_MOUNT

__all__ = ["bootstrap_archive", "package_archive", "precompile_runtime", "write_bootstrap"]

#: Parts of a package a kernel never imports: compiled caches (of this host's Python)
#: and the JupyterLab extension's built files (the Jupyter server serves them).
_NOT_COPIED = frozenset({"__pycache__", "labextension"})


@functools.cache
def precompile_runtime(runtime_dir: Path) -> bool:
    """Compile the runtime's modules once, here, for every kernel to load.

    A kernel's runtime directory is read-only, so Python would compile the runtime
    in every container at every start, out of the kernel's own CPU share (about 30
    ms of CPU: 0.6 s of a 0.05 cpu kernel's start). Hash-checked caches stay valid
    when the files are copied into a remote engine's containers with new times; an
    image whose Python differs just compiles, as before. ``False``: the package
    directory is not writable here (nothing gained, nothing broken)."""
    return bool(
        compileall.compile_dir(
            str(runtime_dir),
            quiet=2,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
    )


def bootstrap_archive(bootstrap: dict[str, Any], runtime_dir: Path) -> bytes:
    """For an engine that cannot see our files: ``home/config/bootstrap.json`` (0600), an
    empty ``home/work/``, and the runtime itself under ``opt/bai-runtime`` (read-only)."""
    buf = io.BytesIO()
    now = time.time()

    def add_dir(tar: tarfile.TarFile, name: str, mode: int) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, now
        tar.addfile(info)

    def add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, now
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(fileobj=buf, mode="w") as tar:
        add_dir(tar, "home/config", 0o755)
        add_file(tar, "home/config/bootstrap.json", json.dumps(bootstrap).encode(), 0o600)
        add_dir(tar, "home/work", 0o755)
        add_dir(tar, RUNTIME_MOUNT.lstrip("/"), 0o555)
        for path in sorted(runtime_dir.rglob("*")):
            name = f"{RUNTIME_MOUNT.lstrip('/')}/{path.relative_to(runtime_dir).as_posix()}"
            if path.is_dir():
                add_dir(tar, name, 0o555)
            else:
                add_file(tar, name, path.read_bytes(), 0o444)
    return buf.getvalue()


@functools.cache
def package_archive(packages: tuple[tuple[Path, str], ...]) -> bytes:
    """``packages`` (each directory with the path it goes to), read-only, for a remote
    engine's main1, where ``%bai`` runs: made once, the same for every kernel."""
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for root, target in packages:
            paths = [root, *sorted(root.rglob("*"))]
            for path in paths:
                relative = path.relative_to(root)
                if _NOT_COPIED & set(relative.parts):
                    continue
                name = target.strip("/")
                info = tarfile.TarInfo(name if path == root else f"{name}/{relative.as_posix()}")
                info.mtime = now
                if path.is_dir():
                    info.type, info.mode = tarfile.DIRTYPE, 0o555
                    tar.addfile(info)
                else:
                    data = path.read_bytes()
                    info.size, info.mode = len(data), 0o444
                    tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_bootstrap(folder: Path, hostname: str, bootstrap: dict[str, Any]) -> Path:
    """The runtime's instructions in a private host file, bind-mounted read-only.

    A bind costs nothing at start, where copying a tar in takes ~35 ms; the
    rest of ``/home/config`` stays writable inside the container."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{hostname}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(bootstrap, file)
    return path
