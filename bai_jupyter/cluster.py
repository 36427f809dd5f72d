"""What each kernel of a session is told: its environment, keys and start-up plan.

Pure functions of the session record; the manager builds a :class:`KernelPlan`
per kernel and hands it to the agent, which turns it into a container or a
process. The plan's ``bootstrap`` is what the in-container runtime reads.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from .model import ClusterMode, Kernel, KernelRole, Session, SessionType

#: sshd listens here in every kernel (Backend.AI's convention).
SSH_PORT = 2200
#: Rendezvous port exported as MASTER_PORT for distributed frameworks.
MASTER_PORT = 12345
#: Where the runtime writes ``environ.txt``, ``resource.txt``, ``ssh/`` and kernel files.
CONFIG_DIR = "/home/config"
#: The working directory of every kernel; data folders are mounted under it.
WORK_DIR = "/home/work"
#: Where the notebook's directory (the Jupyter server's root dir) is mounted in every kernel.
NOTEBOOK_DIR = f"{WORK_DIR}/notebooks"
#: Docker labels carried by everything bai-jupyter creates.
LABEL_ROOT = "ai.backend.bai-jupyter"
LABEL_SESSION = f"{LABEL_ROOT}.session-id"
LABEL_KERNEL = f"{LABEL_ROOT}.kernel-id"
LABEL_ROLE = f"{LABEL_ROOT}.role"
LABEL_HOST = f"{LABEL_ROOT}.cluster-host"
#: The store (one manager's world) a kernel belongs to: a manager never touches others'.
LABEL_SCOPE = f"{LABEL_ROOT}.store-id"


@dataclass(frozen=True)
class SSHKeys:
    """One keypair per session (user key and sshd host key), OpenSSH text form."""

    private_key: str
    public_key: str
    host_private_key: str
    host_public_key: str


def generate_ssh_keys() -> SSHKeys:
    """Fresh ed25519 keys for a session's passwordless SSH."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    def pair(comment: str) -> tuple[str, str]:
        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode()
        public = (
            key.public_key()
            .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            .decode()
        )
        return private, f"{public} {comment}\n"

    user_private, user_public = pair("bai-jupyter-session")
    host_private, host_public = pair("bai-jupyter-host")
    return SSHKeys(user_private, user_public, host_private, host_public)


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


@dataclass
class KernelPlan:
    """Everything an agent needs to start one kernel."""

    session_id: str
    kernel_id: str
    hostname: str
    role: KernelRole
    image: str
    slots: dict[str, str]
    env: dict[str, str]
    mounts: list[Mount]
    labels: dict[str, str]
    #: The runtime's instructions (written to ``CONFIG_DIR/bootstrap.json``).
    bootstrap: dict[str, Any] = field(default_factory=dict)
    #: The kernel's working directory (a path inside the kernel, under a mount's target);
    #: ``None``: ``WORK_DIR``. The notebook's own folder when the notebook dir is mounted.
    work_dir: str | None = None


def kernel_environ(session: Session, kernel: Kernel) -> dict[str, str]:
    """The BACKENDAI_* variables and the names distributed frameworks read."""
    hosts = [k.hostname for k in session.kernels]
    subs = sum(1 for k in session.kernels if k.role is KernelRole.SUB)
    same_role = [k for k in session.kernels if k.role is kernel.role]
    mode = session.spec.cluster_mode
    rank = hosts.index(kernel.hostname)
    if mode is ClusterMode.SINGLE_NODE or kernel.agent_id is None:
        local_rank = rank
    else:
        local_rank = [k.hostname for k in session.kernels if k.agent_id == kernel.agent_id].index(
            kernel.hostname
        )
    return {
        **session.spec.env,
        "BACKENDAI_SESSION_ID": session.id,
        "BACKENDAI_SESSION_NAME": session.spec.name or "",
        "BACKENDAI_KERNEL_ID": kernel.id,
        "BACKENDAI_CLUSTER_HOST": kernel.hostname,
        "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
        "BACKENDAI_CLUSTER_IDX": str(same_role.index(kernel) + 1),
        "BACKENDAI_CLUSTER_ROLE": kernel.role.value,
        "BACKENDAI_CLUSTER_SIZE": str(len(hosts)),
        "BACKENDAI_CLUSTER_MODE": mode.value,
        "BACKENDAI_CLUSTER_REPLICAS": f"main:1,sub:{subs}" if subs else "main:1",
        "BACKENDAI_CLUSTER_LOCAL_RANK": str(local_rank),
        "BACKENDAI_SESSION_TYPE": session.spec.type.value,
        "MASTER_ADDR": "main1",
        "MASTER_PORT": str(MASTER_PORT),
        "WORLD_SIZE": str(len(hosts)),
        "RANK": str(rank),
    }


def bootstrap(
    session: Session,
    kernel: Kernel,
    keys: SSHKeys | None,
    connection: dict[str, Any] | None,
) -> dict[str, Any]:
    """The runtime's instructions for one kernel (see ``bai_jupyter/runtime``)."""
    spec = session.spec
    is_main = kernel.role is KernelRole.MAIN
    if not is_main:
        mode = "wait"
    elif spec.type is SessionType.BATCH:
        mode = "batch"
    elif spec.type is SessionType.INTERACTIVE:
        mode = "kernel"
    else:
        mode = "wait"  # inference/system: service ports only
    return {
        "mode": mode,
        "hostname": kernel.hostname,
        "hosts": [k.hostname for k in session.kernels],
        "resources": kernel.slots.to_json(),
        "startup_command": spec.startup_command if is_main else None,
        "batch_timeout": spec.batch_timeout if is_main else None,
        "service_ports": list(spec.service_ports) if is_main else [],
        "connection": connection if mode == "kernel" else None,
        "ssh": None
        if keys is None
        else {
            "port": SSH_PORT,
            "private_key": keys.private_key,
            "public_key": keys.public_key,
            "host_private_key": keys.host_private_key,
            "host_public_key": keys.host_public_key,
        },
    }


def labels(session: Session, kernel: Kernel, scope: str) -> dict[str, str]:
    """Labels that let a restarted manager find and reconcile its containers."""
    return {
        LABEL_ROOT: "1",
        LABEL_SCOPE: scope,
        LABEL_SESSION: session.id,
        LABEL_KERNEL: kernel.id,
        LABEL_ROLE: kernel.role.value,
        LABEL_HOST: kernel.hostname,
    }
