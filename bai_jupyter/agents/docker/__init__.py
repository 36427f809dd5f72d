"""The Docker backend: kernels as containers, one private bridge network per session.

Layout of a session ``S`` on one engine: its kernels' containers
``bai-<S[:12]>-<hostname>`` on the internal bridge ``bai-<S[:12]>`` (see
``networks``), main1 also on the shared egress bridge where its ports are
reached; each container's limits, mounts and ports come from ``containers``
(its bootstrap file from ``bootstrap``); the host firewall from ``firewall``;
engine events from the thread in ``watcher``; the SDK client from ``engine``;
``agent`` ties them together as :class:`DockerAgent`.
"""

from .agent import DockerAgent
from .firewall import FIREWALL_CHAIN
from .limits import KEPT_CAPABILITIES
from .networks import EGRESS_NETWORK

__all__ = ["EGRESS_NETWORK", "FIREWALL_CHAIN", "KEPT_CAPABILITIES", "DockerAgent"]
