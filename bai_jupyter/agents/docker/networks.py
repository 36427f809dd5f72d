"""The bridges of an engine: one private bridge per session, and the shared egress bridge.

* ``bai-<S[:12]>``: the session's bridge, ``internal`` (no route out), labelled
  with the session; every kernel joins it under its hostname as alias, so
  ``main1``, ``sub1`` … resolve through Docker's DNS and nothing outside the
  session can reach a sub kernel. Its interface is ``bai<S[:12]>``, so one
  firewall rule (``-i bai+``) covers every session.
* ``bai-jupyter-egress``: main kernels are created on it first (Docker publishes
  no port from an internal network); inter-container traffic on it is off, so
  the main kernels of two sessions cannot talk to each other through it. Its
  gateway is the address kernels reach this host at. A main1 on both networks gets
  two ``/etc/hosts`` lines for its hostname in no fixed order: it is told the
  egress subnets (``egress_subnets``), and its runtime keeps only the session
  network's (``runtime/hosts.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import docker.errors

from ...kernel_plan import LABEL_ROOT, LABEL_SESSION
from .engine import Engine, gather_all

__all__ = ["BRIDGE_PREFIX", "EGRESS_NETWORK", "Networks", "create_network_once", "network_name"]

#: The shared, non-internal bridge on which main kernels publish their ports.
EGRESS_NETWORK = "bai-jupyter-egress"
#: Session bridges get interface names with this prefix (15 characters at most).
BRIDGE_PREFIX = "bai"


def network_name(session_id: str) -> str:
    return f"bai-{session_id[:12]}"


def create_network_once(api: Any, name: str, **options: Any) -> None:
    """Create a network unless one of that exact name exists (idempotent; blocking, for
    :meth:`Engine.call`): ``options`` are ``create_network``'s (driver, labels, …)."""
    if any(n["Name"] == name for n in api.networks(names=[name])):
        return
    try:
        api.create_network(name, check_duplicate=True, **options)
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: created meanwhile by a concurrent call
            raise


class Networks:
    """Makes, inspects and removes the bridges of one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        #: The egress bridge is known to exist (checked again after a failed start).
        self.egress_ready = False
        self._egress_lock = asyncio.Lock()
        #: The egress bridge's subnets, as last read (read again once it was made again).
        self._egress_subnets: list[str] | None = None

    async def ensure(
        self, api: Any, name: str, labels: dict[str, str], internal: bool, options: dict[str, str]
    ) -> None:
        """Create a bridge network unless one of that exact name exists (idempotent)."""

        def ensure() -> None:
            create_network_once(
                api,
                name,
                driver="bridge",
                internal=internal,
                labels=labels,
                options=options or None,
            )

        await self.engine.call(f"cannot create network {name}", ensure)

    async def ensure_egress(self, api: Any) -> None:
        """The shared bridge main1 kernels reach out through (kernels can't talk on it)."""
        # One at a time: the engine's duplicate check is racy, and concurrent starts
        # on a fresh engine made several networks of that name ("ambiguous" ever after).
        async with self._egress_lock:
            if not self.egress_ready:
                await self.ensure(
                    api,
                    EGRESS_NETWORK,
                    {LABEL_ROOT: "1"},
                    internal=False,
                    options={"com.docker.network.bridge.enable_icc": "false"},
                )
                self.egress_ready = True
                self._egress_subnets = None

    def session_network(self, api: Any, session_id: str) -> asyncio.Future[None]:
        """Start making the session's internal bridge (kernels that join it wait for it)."""
        labels = {LABEL_ROOT: "1", LABEL_SESSION: session_id}
        bridge = {"com.docker.network.bridge.name": f"{BRIDGE_PREFIX}{session_id[:12]}"}
        return asyncio.ensure_future(
            self.ensure(api, network_name(session_id), labels, internal=True, options=bridge)
        )

    async def egress(self) -> dict[str, Any]:
        """The egress bridge as the engine describes it (made first if need be)."""
        api = await self.engine.api()
        await self.ensure_egress(api)
        info: dict[str, Any] = await self.engine.call(
            f"cannot inspect network {EGRESS_NETWORK}", api.inspect_network, EGRESS_NETWORK
        )
        return info

    async def egress_subnets(self) -> list[str]:
        """The egress bridge's subnets: no kernel's own hostname may resolve into them."""
        if self._egress_subnets is None:
            configs = ((await self.egress()).get("IPAM") or {}).get("Config") or []
            self._egress_subnets = [str(c["Subnet"]) for c in configs if c.get("Subnet")]
        return self._egress_subnets

    async def gateway(self) -> str | None:
        """The egress bridge's gateway: this host, as kernels reach it."""
        configs = ((await self.egress()).get("IPAM") or {}).get("Config") or []
        gateway = configs[0].get("Gateway") if configs else None
        return str(gateway) if gateway else None

    async def egress_interface(self) -> str:
        """The host's interface of the egress bridge (what the firewall matches)."""
        info = await self.egress()
        options = info.get("Options") or {}
        return str(options.get("com.docker.network.bridge.name") or f"br-{info['Id'][:12]}")

    async def remove_session(self, api: Any, session_id: str) -> None:
        """Remove every local network labelled with the session (idempotent); a session's
        Swarm overlay is removed through a manager node once every engine has let go."""
        label = f"{LABEL_SESSION}={session_id}"

        def remove(nid: str) -> None:
            with contextlib.suppress(docker.errors.NotFound):
                api.remove_network(nid)

        found = await self.engine.call(
            "cannot list networks", api.networks, filters={"label": label}
        )
        local = [n for n in found if n.get("Scope", "local") == "local"]
        await gather_all(
            [self.engine.call(f"cannot remove network {n['Name']}", remove, n["Id"]) for n in local]
        )
