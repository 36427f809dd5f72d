"""What each kernel of a session is told: its environment, keys and start-up plan.

Pure functions of the session record; the manager builds a :class:`KernelPlan`
per kernel and hands it to the agent, which turns it into a container or a
process. The plan's ``bootstrap`` is what the in-container runtime reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model import ClusterMode, Kernel, KernelRole, Session, SessionType
from .mounts import Mount
from .runtime.protocol import SSH_PORT

#: Rendezvous port exported as MASTER_PORT for distributed frameworks.
MASTER_PORT = 12345
#: Docker labels carried by everything bai-jupyter creates.
LABEL_ROOT = "ai.backend.bai-jupyter"
LABEL_SESSION = f"{LABEL_ROOT}.session-id"
LABEL_KERNEL = f"{LABEL_ROOT}.kernel-id"
LABEL_ROLE = f"{LABEL_ROOT}.role"
LABEL_HOST = f"{LABEL_ROOT}.cluster-host"
#: The session's owner (the host firewall lets the same-named local user reach main1).
LABEL_OWNER = f"{LABEL_ROOT}.owner"
#: The store (one manager's world) a kernel belongs to: a manager never touches others'.
LABEL_SCOPE = f"{LABEL_ROOT}.store-id"


@dataclass(frozen=True)
class SSHKeys:
    """One keypair per session (user key and sshd host key), OpenSSH text form."""

    private_key: str
    public_key: str
    host_private_key: str
    host_public_key: str


def ed25519_pair(comment: str) -> tuple[str, str]:
    """A fresh ed25519 key pair in OpenSSH text form: (private key, public key line)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

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


def generate_ssh_keys() -> SSHKeys:
    """Fresh ed25519 keys for a session's passwordless SSH."""
    user_private, user_public = ed25519_pair("bai-jupyter-session")
    host_private, host_public = ed25519_pair("bai-jupyter-host")
    return SSHKeys(user_private, user_public, host_private, host_public)


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
    #: What the manager keeps for the session's owner and never hands to the kernel (the
    #: private key of a system session's SFTP key pair); agents ignore it.
    private: dict[str, Any] = field(default_factory=dict)
    #: The network the session's kernels share across agents (a Swarm overlay, made by the
    #: manager) when they are spread over several; ``None``: the agent makes its own.
    network: str | None = None


def kernel_environ(session: Session, kernel: Kernel) -> dict[str, str]:
    """The BACKENDAI_* variables and the names distributed frameworks read."""
    hosts = [k.hostname for k in session.kernels]
    same_role = [k for k in session.kernels if k.role_name == kernel.role_name]
    role = dict(session.spec.kernel_shapes())[kernel.hostname]
    mode = session.spec.cluster_mode
    rank = hosts.index(kernel.hostname)
    if mode is ClusterMode.SINGLE_NODE or kernel.agent_id is None:
        local_rank = rank
    else:
        local_rank = [k.hostname for k in session.kernels if k.agent_id == kernel.agent_id].index(
            kernel.hostname
        )
    return {
        **role.env,
        "BACKENDAI_SESSION_ID": session.id,
        "BACKENDAI_SESSION_NAME": session.spec.name or "",
        "BACKENDAI_KERNEL_ID": kernel.id,
        "BACKENDAI_CLUSTER_HOST": kernel.hostname,
        "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
        "BACKENDAI_CLUSTER_IDX": str(same_role.index(kernel) + 1),
        "BACKENDAI_CLUSTER_ROLE": kernel.role_name,
        "BACKENDAI_CLUSTER_SIZE": str(len(hosts)),
        "BACKENDAI_CLUSTER_MODE": mode.value,
        "BACKENDAI_CLUSTER_REPLICAS": session.spec.replicas_text(),
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
    sftp: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The runtime's instructions for one kernel (see ``bai_jupyter/runtime``); ``sftp``:
    a system session's SFTP server (port, user, authorized keys, host key)."""
    spec = session.spec
    is_main = kernel.role is KernelRole.MAIN
    if not is_main:
        mode = "wait"
    elif spec.type is SessionType.BATCH:
        mode = "batch"
    elif spec.type is SessionType.INTERACTIVE:
        mode = "kernel"
    elif spec.type is SessionType.SYSTEM:
        mode = "sftp"
    elif spec.type is SessionType.INFERENCE and (spec.startup_command or "").strip():
        mode = "serve"  # the model server
    else:
        mode = "wait"  # inference with services from the image only
    return {
        "mode": mode,
        "hostname": kernel.hostname,
        "hosts": [k.hostname for k in session.kernels],
        "resources": kernel.slots.to_json(),
        "startup_command": spec.startup_command if is_main else None,
        "batch_timeout": spec.batch_timeout if is_main else None,
        "service_ports": list(spec.service_ports) if is_main else [],
        "connection": connection if mode == "kernel" else None,
        "sftp": sftp if mode == "sftp" else None,
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
        LABEL_ROLE: kernel.role_name,
        LABEL_HOST: kernel.hostname,
        LABEL_OWNER: session.owner,
    }
