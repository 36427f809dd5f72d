"""What the package and the in-kernel runtime agree on: one place for every shared word.

Stdlib only, importable both as ``bai_jupyter.runtime.protocol`` (the manager,
the agents, the request schema) and from inside a kernel, where the runtime
directory runs on the image's own ``python3`` with nothing of ours installed.
The runtime speaks to the agent through its log: every line it prints starts
with :data:`PREFIX`; :data:`READY_LINE` says the kernel is set up, and
:data:`TASK_TIMEOUT_LINE` that a batch task hit its timeout.
"""

from __future__ import annotations

import re
import sys

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    from typing import NamedTuple
else:
    from collections import namedtuple as _namedtuple

#: Every runtime message is one line on stderr that starts with this.
PREFIX = "bai-runtime: "
#: Printed once SSH, config files and services are set up: the kernel is usable.
READY = "ready"
READY_LINE = PREFIX + READY
#: Printed when a batch task ran past its ``batch_timeout`` (the runtime then exits 124).
TASK_TIMEOUT = "task-timeout"
TASK_TIMEOUT_LINE = PREFIX + TASK_TIMEOUT
EXIT_TIMEOUT = 124


def say(message: str) -> None:
    """One flushed, prefixed line on stderr (container logs interleave many writers)."""
    sys.stderr.write(PREFIX + " ".join(message.split()) + "\n")
    sys.stderr.flush()


#: The Jupyter kernel's channels, in the order of a connection file's ``*_port`` keys.
CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
#: The connection-file keys of their ports.
CHANNEL_PORT_KEYS = tuple(f"{channel}_port" for channel in CHANNELS)
#: Where main1's ipykernel listens inside a container: five consecutive ports from a base
#: the agent picks at random for each session in this range (reserved for them). A client
#: left over from an ended session (a notebook's, a console's) that reconnects to its old
#: address, now another session's main1, finds nothing on its old ports.
KERNEL_PORT_RANGE = (20000, 29999)
#: Every base a kernel's ports may start from (a multiple of the channel count apart).
KERNEL_PORT_BASES = range(KERNEL_PORT_RANGE[0], KERNEL_PORT_RANGE[1] + 1, len(CHANNELS))


def kernel_ports(base: int) -> dict[str, int]:
    """The Jupyter channels' ports from ``base``: ``{"shell": base, "iopub": base + 1, …}``."""
    return dict(zip(CHANNELS, range(base, base + len(CHANNELS))))


#: sshd listens here in every kernel of a cluster (Backend.AI's convention).
SSH_PORT = 2200
#: The login of a system session's SFTP server (root's uid in the container, chrooted to
#: WORK_DIR, SFTP only).
SFTP_USER = "work"
#: The login of a system session's rsync (rsync's daemon over SSH, chrooted by rsync to
#: WORK_DIR, module RSYNC_MODULE; same key) where the image has rsync.
RSYNC_USER = "rsync"
RSYNC_MODULE = "work"

#: Where the runtime directory is mounted (read-only) in every kernel.
RUNTIME_MOUNT = "/opt/bai-runtime"
#: Where the runtime writes ``environ.txt``, ``resource.txt``, ``ssh/`` and kernel files.
CONFIG_DIR = "/home/config"
#: The working directory of every kernel; data folders are mounted under it.
WORK_DIR = "/home/work"
#: Where the notebook's directory (the Jupyter server's root dir) is mounted in every kernel.
NOTEBOOK_DIR = WORK_DIR + "/notebooks"
#: In CONFIG_DIR: written when a warm pool's session is claimed, ``{"work_dir": …}``, the
#: claiming notebook's folder, where a restarted ipykernel starts from then on.
CLAIM_FILE = "claim.json"

#: The kernel image a request that names none runs (``bai-jupyter image build`` makes it).
DEFAULT_IMAGE = "bai-jupyter/python:3.11"

#: Protocols of a service port: proxied over HTTP (``http``, ``preopen``) or raw ``tcp``.
SERVICE_PROTOCOLS = ("http", "tcp", "preopen")
_SERVICE_RE = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.-]*):(http|tcp|preopen):(\d{1,5})")

if TYPE_CHECKING:

    class _ServicePortBase(NamedTuple):
        name: str
        protocol: str
        port: int

else:
    _ServicePortBase = _namedtuple("_ServicePortBase", "name protocol port")


class ServicePort(_ServicePortBase):
    """A service of main1, written ``name:proto:port`` (Backend.AI's image label form)."""

    __slots__ = ()

    @classmethod
    def parse(cls, text: str) -> ServicePort:
        """``ValueError`` (saying what is wrong) unless ``text`` is ``name:proto:port``."""
        match = _SERVICE_RE.fullmatch(text)
        if match is None:
            raise ValueError(
                f"{text!r} is not 'name:proto:port' (proto: {', '.join(SERVICE_PROTOCOLS)})"
            )
        port = int(match.group(3))
        if not 1 <= port <= 65535:
            raise ValueError(f"{text!r}: port {port} is not in 1-65535")
        return cls(match.group(1), match.group(2), port)

    @property
    def port_key(self) -> str:
        """Its key among a started kernel's ports (beside the Jupyter channels' names)."""
        return f"service:{self.name}"

    @property
    def proxied(self) -> bool:
        """Whether the server proxies it (HTTP and WebSocket); raw ``tcp`` is not."""
        return self.protocol != "tcp"

    def __str__(self) -> str:
        return f"{self.name}:{self.protocol}:{self.port}"
