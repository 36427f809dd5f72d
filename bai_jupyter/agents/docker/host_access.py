"""The Docker agent and this host's firewall: which of this manager's kernels reach its
kernel-access listener, and which local users reach them.

A mixin of the agent (see :mod:`.firewall` for the chains themselves).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import sys

from ...kernel_plan import LABEL_OWNER, LABEL_SCOPE
from ..base import AgentBackend, AgentError
from .engine import Engine
from .firewall import HostFirewall
from .networks import EGRESS_NETWORK, Networks
from .options import DockerOptions

__all__ = ["DockerHostAccess"]


class DockerHostAccess(DockerOptions, AgentBackend):
    """What of the host a local engine's kernels reach, and who on the host reaches them."""

    engine: Engine
    networks: Networks
    local: bool
    _firewall: HostFirewall
    #: The store whose kernels are this manager's ('' until told).
    _scope = ""

    def use_scope(self, scope: str) -> None:
        """This manager's kernels are those of store ``scope`` (the firewall lets only them
        reach its listener); the firewall's tag names the store."""
        self._scope = scope
        self._firewall.name(scope)

    @property
    def firewalled(self) -> bool:
        """Whether the host firewall applies: this host's engine, its bridges this host's."""
        on_host = self.local and not self.address
        return self.host_firewall and on_host and sys.platform.startswith("linux")

    async def allow_host_ports(self, listeners: list[tuple[str, int]]) -> None:
        """Block this engine's kernels from the host except the ``listeners`` (address, port)
        at their own host address (each running main1 of this store: its own rule), and
        other local users from the kernels; see :mod:`.firewall`. Without root or
        iptables a warning says what stays reachable."""
        if not self.firewalled:
            return
        address = await self.host_address()
        own = [(a, p) for a, p in listeners if a == address]
        error = await self._firewall.allow(await self.networks.egress_interface(), own)
        if error:
            self.log.warning(
                "agent %s: no host firewall (%s): kernels can reach every host service "
                "listening on 0.0.0.0, and every local user can reach the kernels",
                self.id,
                error,
            )
            return
        # This store's kernels running from before (a restart) or meanwhile: their rules
        # again. Only main1 is on the egress bridge; the others are skipped.
        for kernel in await self.live_kernels():
            if kernel.running and kernel.labels.get(LABEL_SCOPE) == self._scope:
                try:
                    await self._let_in(kernel.session_id, kernel.labels, kernel.container_id)
                except AgentError as exc:  # removed meanwhile
                    self.log.debug("agent %s: %s", self.id, exc)

    async def _let_in(self, session_id: str, labels: dict[str, str], cid: str) -> None:
        """A started main1 reaches this manager's listener, and the local user named as
        the session's owner reaches main1 (see ``firewall_lets_owners``)."""
        if not self._firewall.on:
            return
        api = await self.engine.api()
        info = await self.engine.call(f"cannot inspect {cid[:12]}", api.inspect_container, cid)
        address = info["NetworkSettings"]["Networks"].get(EGRESS_NETWORK, {}).get("IPAddress")
        if not address:
            return  # not on the egress bridge: a sub kernel
        await self._firewall.let(
            session_id, await self.networks.egress_interface(), address, await self._uid(labels)
        )

    async def _uid(self, labels: dict[str, str]) -> int | None:
        """The local user named as the owner, where it is not root or ours already."""
        owner = labels.get(LABEL_OWNER)
        if not (self.firewall_lets_owners and owner):
            return None
        try:
            uid = (await asyncio.to_thread(pwd.getpwnam, owner)).pw_uid
        except KeyError:
            return None  # no such local user: only the manager's user and root
        return None if uid in (0, os.getuid()) else uid
