"""The bounds a new session request must keep, and the names and image grammar it uses."""

from __future__ import annotations

import re

from ..runtime.protocol import KERNEL_PORT_RANGE as KERNEL_PORT_BOUNDS
from ..runtime.protocol import SSH_PORT

#: Session and template names (use with ``fullmatch``).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SERVICE_NAME_RE = re.compile(r"[a-z][a-z0-9-]*")
MAX_CLUSTER_SIZE = 64
MAX_PRIORITY = 100

# Bounds a new request must keep (``bounded`` parsing). Records stored before a bound
# existed still load: the store and the API's client parse with ``bounded=False``.
#: 9999-12-31T23:59:59Z: the last second ``datetime`` can show.
MAX_TIMESTAMP = 253402300799
MAX_BATCH_TIMEOUT = 366 * 86400
MAX_COUNT = 2**20  # cpus, devices
MAX_BYTES = 2**60  # memory
MAX_DECIMALS = 3  # cpu 0.001 at the finest (Docker's NanoCpus would truncate finer ones)
MAX_DEPENDS_ON = 64
MAX_ENV = 256
MAX_ENV_BYTES = 64 * 1024  # all names and values together
MAX_COMMAND = 64 * 1024
MAX_MOUNTS = 64
MAX_SERVICE_PORTS = 32
MAX_TEXT = 4096  # image, resource group, a mount entry, a template description
MAX_PUBLIC_KEY = 16 * 1024  # an OpenSSH public key line (RSA 16384 fits)
#: An OpenSSH public key line: type, base64 blob, optional comment (one line).
PUBLIC_KEY_RE = re.compile(
    r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|"
    r"sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\r\n]*)?"
)
#: Ports of main1 our runtime uses itself: sshd, and the range the Jupyter kernel's five
#: channels are picked from per session (``runtime.protocol.KERNEL_PORT_RANGE``). A service
#: port there could clash with the kernel's.
RESERVED_PORTS = frozenset({SSH_PORT, *range(KERNEL_PORT_BOUNDS[0], KERNEL_PORT_BOUNDS[1] + 1)})
#: The Jupyter kernel's port range as help texts write it (``20000-29999``).
KERNEL_PORT_RANGE = f"{KERNEL_PORT_BOUNDS[0]}-{KERNEL_PORT_BOUNDS[1]}"
#: :data:`RESERVED_PORTS` as help texts write them (``2200 and 20000-29999``).
RESERVED_PORTS_TEXT = f"{SSH_PORT} and {KERNEL_PORT_RANGE}"
#: A Docker image reference (distribution/reference grammar): [host[:port]/]path[:tag][@digest].
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_RE = re.compile(
    rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
