"""The Docker agent's options: every trait of ``c.DockerAgent.*`` beyond the agent base's.

A mixin of traits only, so that a reader finds every engine setting and its help
in one place; not a ``Configurable`` of its own, so the config section stays
``DockerAgent``. Each entry of ``c.BaiSessionManager.agents`` may set them too.
"""

from __future__ import annotations

import re
from typing import Any

from traitlets import Bool, Enum, HasTraits, Int, TraitError, Unicode, default, validate

__all__ = ["DockerOptions"]


class DockerOptions(HasTraits):
    """The settings of :class:`~bai_jupyter.agents.docker.DockerAgent`, each with its help."""

    endpoint = Unicode(
        None,
        allow_none=True,
        config=True,
        help="The engine's URL, e.g. 'unix:///var/run/docker.sock' or 'tcp://host:2376'; "
        "default: the environment's engine (DOCKER_HOST, else the local socket).",
    )
    publish_ports = Bool(
        None,
        allow_none=True,
        config=True,
        help="Publish main1's ports on 127.0.0.1 (or `address`) (true), or reach main1 at "
        "its address on the egress bridge (false); default: publish unless the engine is "
        "local on Linux and has no `address`.",
    )
    address = Unicode(
        "",
        config=True,
        help="The address this host reaches the engine's machine at (another host, or a "
        "node of a Swarm): main1's ports are published on this address only (never on "
        "0.0.0.0) and the manager connects there. '': 127.0.0.1 when ports are published.",
    )
    manager_address = Unicode(
        "",
        config=True,
        help="The address this agent's kernels reach the manager's host at; the kernel-"
        "access listener (%bai in kernels) listens there. '': the egress bridge's gateway on "
        "a local engine without `address`; none elsewhere.",
    )
    tls_cert_path = Unicode(
        "",
        config=True,
        help="A directory with ca.pem, cert.pem and key.pem: a tcp:// endpoint is reached "
        "over TLS, the engine verified against ca.pem (as DOCKER_CERT_PATH for the Docker "
        "CLI). '': plain TCP (only on a trusted network), or DOCKER_* when no endpoint is set.",
    )
    disk_limit = Unicode(
        "",
        config=True,
        help="Size limit of each kernel's writable layer (e.g. '10g'); '' = none. Needs a "
        "storage driver that supports it (overlay2 on xfs with pquota, devicemapper, btrfs, "
        "zfs); elsewhere a warning is logged once and kernels run without it.",
    )
    host_firewall = Bool(
        True,
        config=True,
        help="Block kernels from this host's services except this manager's kernel-access "
        "listener (chain BAI-JUPYTER-INPUT in INPUT), and other local users from kernels "
        "(BAI-JUPYTER-OUTPUT in OUTPUT: only root, the manager's user and, see "
        "firewall_lets_owners, each session's owner). Needs root and iptables, else a "
        "warning is logged. Local engines on Linux only; ports are then never published.",
    )
    firewall_lets_owners = Bool(
        True,
        config=True,
        help="With the host firewall: the local user named as a session's owner (if one "
        "exists) may connect to that session's main1, besides the manager's user and root "
        "(JupyterHub with local users: each user's server talks to its kernels directly). "
        "False: only the manager's user and root reach kernels.",
    )
    pids_limit = Int(4096, config=True, help="How many processes each kernel may have at once.")
    sftp_address = Unicode(
        config=True,
        help="The host address a system session's SFTP port is published on; default: "
        "`address` where set (the engine's machine as this host reaches it), else 127.0.0.1 "
        "(this machine only; reach it from elsewhere through an SSH tunnel); or a public "
        "interface's address, or 0.0.0.0 (every interface). Its port is chosen by the engine.",
    )

    sftp_host = Unicode(
        "",
        config=True,
        help="The host name people connect to for SFTP, as the API shows it (e.g. "
        "'gpu1.example.org'); default: sftp_address, or this machine's name when that is "
        "0.0.0.0.",
    )

    log_driver = Enum(
        ["json-file", "local"],
        "json-file",
        config=True,
        help="The log driver of kernels' containers (whatever the engine's default): "
        "'json-file' or 'local', both rotated by `log_max_size` and `log_max_files`, both "
        "read back by `docker logs` and the sessions API.",
    )
    log_max_size = Unicode(
        "10m",
        config=True,
        help="Size at which a kernel's container log file is rotated (e.g. '10m', '512k'): "
        "with `log_max_files`, what a kernel's output can take on the engine's disk.",
    )
    log_max_files = Int(
        3,
        min=1,
        config=True,
        help="How many rotated log files each kernel's container keeps (the oldest goes).",
    )

    @validate("log_max_size")
    def _check_log_max_size(self, proposal: dict[str, Any]) -> str:
        value = str(proposal["value"]).strip().lower()
        if not re.fullmatch(r"[1-9][0-9]*[kmg]?", value):
            raise TraitError(f"log_max_size: a size such as '10m' or '512k', got {value!r}")
        return value

    @property
    def log_config(self) -> dict[str, Any]:
        """The containers' ``HostConfig.LogConfig``: a bounded log on the engine's disk."""
        return {
            "type": self.log_driver,
            "config": {"max-size": self.log_max_size, "max-file": str(self.log_max_files)},
        }

    @default("sftp_address")
    def _sftp_address_default(self) -> str:
        return self.address or "127.0.0.1"
