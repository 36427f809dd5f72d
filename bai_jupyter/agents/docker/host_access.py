"""The Docker agent and this host's firewall: its kernels' egress bridge per store, the
rules that let them reach only this manager's listener, and who may reach them.

A mixin of the agent (see :mod:`.firewall` for the chains themselves).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import sys

from ...kernel_plan import LABEL_OWNER
from ..base import AgentBackend, AgentError
from .engine import Engine
from .firewall import HostFirewall
from .networks import BRIDGE_PREFIX, Networks
from .options import DockerOptions

__all__ = ["DockerHostAccess"]


class DockerHostAccess(DockerOptions, AgentBackend):
    """What of the host a local engine's kernels reach, and who on the host reaches them."""

    engine: Engine
    networks: Networks
    local: bool
    _firewall: HostFirewall

    def use_scope(self, scope: str) -> None:
        """Kernels of store ``scope`` get an egress bridge of their own (the firewall keys
        each deployment's rules on it) and the firewall's tag names the store."""
        self.networks.use_scope(scope)
        self._firewall.name(scope)

    @property
    def egress_name(self) -> str:
        """The egress bridge's network name (main1's ports are reached there)."""
        return self.networks.egress_name

    @property
    def firewalled(self) -> bool:
        """Whether the host firewall applies: this host's engine, its bridges this host's."""
        on_host = self.local and not self.address
        return self.host_firewall and on_host and sys.platform.startswith("linux")

    async def allow_host_ports(self, listeners: list[tuple[str, int]]) -> None:
        """Block this engine's kernels from the host except the ``listeners`` (address, port)
        at their own host address, and other local users from the kernels; see
        :mod:`.firewall`. Without root or iptables a warning says what stays reachable."""
        if not self.firewalled:
            return
        address = await self.host_address()
        own = sorted({(a, p) for a, p in listeners if a == address})
        egress = await self.networks.egress_interface()
        legacy = "" if egress.startswith(BRIDGE_PREFIX) else egress
        error = await self._firewall.allow(egress, own, legacy)
        if error:
            self.log.warning(
                "agent %s: no host firewall (%s): kernels can reach every host service "
                "listening on 0.0.0.0, and every local user can reach the kernels",
                self.id,
                error,
            )
            return
        # Kernels running from before (a restart): their owners again. Only main1 is on the
        # egress bridge; the others are skipped.
        for kernel in await self.live_kernels():
            if kernel.running:
                try:
                    await self._let_owner(kernel.session_id, kernel.labels, kernel.container_id)
                except AgentError as exc:  # removed meanwhile
                    self.log.debug("agent %s: %s", self.id, exc)

    async def _let_owner(self, session_id: str, labels: dict[str, str], cid: str) -> None:
        """The local user named as the session's owner may reach its main1 (see
        ``firewall_lets_owners``)."""
        owner = labels.get(LABEL_OWNER)
        if not (self._firewall.on and self.firewall_lets_owners and owner):
            return
        try:
            uid = (await asyncio.to_thread(pwd.getpwnam, owner)).pw_uid
        except KeyError:
            return  # no such local user: only the manager's user and root
        if uid in (0, os.getuid()):
            return
        api = await self.engine.api()
        info = await self.engine.call(f"cannot inspect {cid[:12]}", api.inspect_container, cid)
        address = info["NetworkSettings"]["Networks"].get(self.egress_name, {}).get("IPAddress")
        if address:
            egress = await self.networks.egress_interface()
            await self._firewall.let_user(session_id, egress, address, uid)
