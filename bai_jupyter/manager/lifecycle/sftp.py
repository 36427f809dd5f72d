"""System sessions: SFTP to the owner's data folders, its keys, and whether it is in use.

A system session's main1 runs the runtime's ``sftp`` mode: an SFTP-only sshd
chrooted to the data folders (and, where the image has rsync, an rsync login:
rsync's own daemon, chrooted there too), its port published by the agent where
people reach it. Its login is a key pair made for the session (the private key goes
only to the owner: ``GET sessions/{key}?connection=true``) or the owner's own
public key from the request (``ssh_public_key``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...agents.base import AgentBackend, KernelStarted
from ...errors import InvalidRequest
from ...kernel_plan import KernelPlan, ed25519_pair
from ...model import Session, SessionSpec, SessionType
from ...runtime.protocol import RSYNC_MODULE, RSYNC_USER, SFTP_USER, SSH_PORT

__all__ = ["check_agents", "open_connections", "record", "sftp_setup"]

#: TCP state "established" in /proc/net/tcp.
_ESTABLISHED = "01"


def check_agents(spec: SessionSpec, agents: Iterable[AgentBackend]) -> None:
    """Refuse a system session in a resource group with no agent that serves SFTP."""
    if spec.type is not SessionType.SYSTEM:
        return
    if not any(agent.sftp for agent in agents if agent.resource_group == spec.resource_group):
        raise InvalidRequest(
            f"type: a system session needs an agent that serves SFTP (the Docker backend); "
            f"resource group {spec.resource_group!r} has none",
            field="type",
        )


def sftp_setup(session: Session) -> tuple[dict[str, Any], dict[str, Any]]:
    """The runtime's ``sftp`` bootstrap section, and what the manager keeps: the client's
    private key (when it made the pair) and the host key people check."""
    host_private, host_public = ed25519_pair("bai-jupyter-sftp-host")
    own = session.spec.ssh_public_key
    private = None
    if own:
        authorized = own
    else:
        private, authorized = ed25519_pair(f"bai-jupyter-sftp-{session.id[:12]}")
    runtime = {
        "port": SSH_PORT,
        "user": SFTP_USER,
        "authorized_keys": authorized,
        "host_private_key": host_private,
    }
    kept = {"private_key": private, "host_public_key": " ".join(host_public.split()[:2])}
    return runtime, kept


def record(plan: KernelPlan, started: KernelStarted) -> dict[str, Any] | None:
    """main1's ``info["sftp"]``: where people connect, as whom, the host key, the key, and
    the command lines of sftp and (where the image has it) rsync."""
    kept = plan.private.get("sftp")
    published = started.published.get("sftp")
    if kept is None or published is None:
        return None
    host, port = published
    where = f"[{host}]:{port}" if port != 22 else host
    return {
        "host": host,
        "port": port,
        "user": SFTP_USER,
        "known_hosts": f"{where} {kept['host_public_key']}",
        "private_key": kept["private_key"],
        "command": f"sftp -P {port} -i KEY_FILE {SFTP_USER}@{host}",
        "rsync": f"rsync -a -e 'ssh -p {port} -i KEY_FILE' LOCAL_DIR/ "
        f"{RSYNC_USER}@{host}::{RSYNC_MODULE}/FOLDER/",
    }


def established(table: str, port: int) -> int:
    """Established TCP connections to local ``port`` in /proc/net/tcp{,6} text."""
    count = 0
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[1]:
            continue
        local_port = fields[1].rsplit(":", 1)[1]
        try:
            if int(local_port, 16) == port and fields[3] == _ESTABLISHED:
                count += 1
        except ValueError:
            continue
    return count


async def open_connections(agent: AgentBackend, kernel_id: str) -> int:
    """How many SFTP connections main1 has open now (asked through the agent's exec)."""
    result = await agent.exec(kernel_id, ["cat", "/proc/net/tcp", "/proc/net/tcp6"], timeout=10)
    return established(result.output, SSH_PORT)
