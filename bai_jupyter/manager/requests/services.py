"""Service ports a running session gains after it started."""

from __future__ import annotations

from ...errors import Conflict, InvalidRequest, Unavailable
from ...model import KernelRole, Session, Status
from ...request import SpecError, parse_service_ports
from ...runtime.protocol import ServicePort
from ..core import Core


class ServicePorts:
    """Adds a service port to a RUNNING session's main1 where its agent can reach it."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def add(self, key: str, service_port: str, owner: str | None = None) -> Session:
        """Declare a service port of a RUNNING session's main1 after start, for the proxy.

        Works where the agent reaches main1 at its own address (any port); a published
        container cannot gain a port (Docker cannot publish on a running container)."""
        try:
            (spec,) = parse_service_ports([service_port], "service_port")
        except SpecError as exc:
            raise InvalidRequest(str(exc), field=exc.field) from exc
        service = ServicePort.parse(spec)
        session = await self.core.get(key, owner)
        if session.status is not Status.RUNNING:
            raise Unavailable(f"session {session.id} is {session.status.value}, not RUNNING")
        if service.name in {s.name for s in session.spec.services}:
            raise Conflict(f"session {session.id} already has a service {service.name!r}")
        main = session.main
        agent = self.core.agent_of(main)
        reached = agent.late_port(service.port)
        if reached is None:
            raise Conflict(
                f"session {session.id}: agent {agent.id} publishes main1's ports and cannot "
                "add one to a running container; declare the port when creating the session "
                "(service_ports, or --service-port on the kernelspec)"
            )
        try:
            parse_service_ports([*session.spec.service_ports, spec])
        except SpecError as exc:
            raise InvalidRequest(str(exc), field=exc.field) from exc

        def adding(s: Session) -> None:
            if s.status is not Status.RUNNING:
                raise Unavailable(f"session {s.id} is {s.status.value}, not RUNNING")
            if service.name in {p.name for p in s.spec.services}:
                raise Conflict(f"session {s.id} already has a service {service.name!r}")
            s.spec.service_ports = [*s.spec.service_ports, spec]
            for kernel in s.kernels:
                if kernel.role is KernelRole.MAIN:
                    ports = {**kernel.info.get("ports", {}), service.port_key: reached}
                    kernel.info = {**kernel.info, "ports": ports}

        return await self.core.edit(session.id, adding)
