"""A kernel's container: its mounts, ports, and the limits and capabilities of ``limits``.

On a local engine the runtime, this package and the bootstrap file are bound
read-only; a remote engine gets them copied in (see ``bootstrap``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Any, Protocol

import docker.errors

from ...kernel_plan import LABEL_KERNEL, LABEL_SESSION, KernelPlan
from ...model import KernelRole
from ...runtime.protocol import (
    CONFIG_DIR,
    DEFAULT_IMAGE,
    KERNEL_PORT_RANGE,
    RUNTIME_MOUNT,
    SSH_PORT,
    WORK_DIR,
    kernel_ports,
)
from ..base import (
    AgentError,
    KernelStarted,
    declared_services,
    kernel_connection,
    kernel_packages,
)
from .bootstrap import bootstrap_archive, package_archive, write_bootstrap
from .engine import BindMount, Engine, explain, gather_all
from .kernel_ports import LABEL_PORT_BASE, PortBases
from .limits import KEPT_CAPABILITIES, kernel_limits
from .networks import EGRESS_NETWORK

__all__ = ["ContainerSettings", "KernelContainers"]

#: The bai_jupyter package, read-only, on every kernel's PYTHONPATH (``%bai`` in main1).
PACKAGE_ROOT = "/opt/bai-jupyter"


def container_name(session_id: str, hostname: str) -> str:
    return f"bai-{session_id[:12]}-{hostname}"


def is_main(plan: KernelPlan) -> bool:
    """The kernel that publishes ports: the interactive, SFTP (or service) main kernel."""
    return plan.role is KernelRole.MAIN and (
        plan.bootstrap.get("mode") in ("kernel", "sftp")
        or bool(plan.bootstrap.get("service_ports"))
    )


def is_sftp(plan: KernelPlan) -> bool:
    """A system session's main1: its SFTP port is published for people, always."""
    return plan.role is KernelRole.MAIN and plan.bootstrap.get("mode") == "sftp"


def _service_ports(plan: KernelPlan) -> list[tuple[str, int]]:
    """main1's service ports as (port key, port in the container)."""
    found = []
    for service in declared_services(plan.bootstrap):
        if KERNEL_PORT_RANGE[0] <= service.port <= KERNEL_PORT_RANGE[1]:
            first, last = KERNEL_PORT_RANGE
            raise AgentError(f"bad service port {service}: {first}-{last} are the kernel's own")
        found.append((service.port_key, service.port))
    return found


def _package_copies() -> tuple[tuple[Path, str], ...]:
    """The packages a remote engine's main1 gets, each with where it goes."""
    return tuple((d, f"{PACKAGE_ROOT}/{d.name}") for d in kernel_packages())


def _check_sources(paths: list[Path]) -> None:
    """Every mount source exists: none is created here (the manager makes data folders)."""
    for path in paths:
        if not path.exists():
            raise AgentError(f"cannot mount {path}: no such host path")


class ContainerSettings(Protocol):
    """What the container spec reads from its agent, at each use."""

    @property
    def id(self) -> str: ...
    @property
    def local(self) -> bool: ...
    @property
    def publish(self) -> bool: ...
    @property
    def publish_ip(self) -> str: ...
    @property
    def runtime_dir(self) -> Path: ...
    @property
    def bootstrap_root(self) -> Path: ...
    @property
    def pids_limit(self) -> int: ...
    @property
    def disk_limit(self) -> str: ...
    @property
    def sftp_address(self) -> str: ...
    @property
    def sftp_host(self) -> str: ...
    @property
    def log_config(self) -> dict[str, Any]: ...


class KernelContainers:
    """Creates kernels' containers on one engine, reads back their ports, removes them."""

    def __init__(
        self,
        settings: ContainerSettings,
        engine: Engine,
        log: logging.Logger | logging.LoggerAdapter[Any],
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.log = log
        #: main1's Jupyter port bases: fresh per session (a stale client finds nothing).
        self.port_bases = PortBases()
        #: Whether the engine accepted ``storage_opt`` (``None``: not tried yet).
        self._disk_limit_works: bool | None = None
        self._disk_lock = asyncio.Lock()

    async def create(
        self,
        api: Any,
        session_id: str,
        net: str,
        plan: KernelPlan,
        net_ready: asyncio.Future[None] | None = None,
        egress_subnets: tuple[str, ...] = (),
    ) -> str:
        """Create (not start) one kernel's container with its bootstrap files in place; a
        kernel on the egress bridge and ``net`` has its runtime take ``egress_subnets`` off
        its hostname (see ``runtime/hosts.py``)."""
        settings = self.settings
        bootstrap = dict(plan.bootstrap)
        publish: dict[int, tuple[str]] = {}
        labels = dict(plan.labels)
        if is_main(plan):
            if bootstrap.get("mode") == "kernel":
                ports = kernel_ports(self.port_bases.pick())
                labels[LABEL_PORT_BASE] = str(ports["shell"])
                bootstrap["connection"] = kernel_connection(
                    bootstrap.get("connection"), "0.0.0.0", ports
                )
                publish.update({port: (settings.publish_ip,) for port in ports.values()})
            for _, port in _service_ports(plan):
                publish[port] = (settings.publish_ip,)
        # For people, not the manager: published wherever the manager reaches main1.
        public: dict[int, tuple[str]] = {}
        if is_sftp(plan):
            public[SSH_PORT] = (settings.sftp_address,)
        bindings = {**(publish if settings.publish else {}), **public}

        # Bind mounts of paths that must exist (the engine would create missing ones as root).
        mounts = [
            BindMount(m.target, m.source, type="bind", read_only=m.read_only) for m in plan.mounts
        ]
        # -I: the session's env (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME …) and the user's
        # site never reach the runtime itself, which runs as root; its children get them.
        command = ["python3", "-I", RUNTIME_MOUNT]
        if plan.work_dir:  # the notebook's folder, under its mount
            command += ["--work-dir", plan.work_dir]
        if settings.local or plan.role is KernelRole.MAIN:
            command += ["--python-path", PACKAGE_ROOT]
        if settings.local:
            await asyncio.to_thread(_check_sources, [Path(m.source) for m in plan.mounts])
            mounts.append(
                BindMount(RUNTIME_MOUNT, str(settings.runtime_dir), type="bind", read_only=True)
            )
            mounts += [
                BindMount(f"{PACKAGE_ROOT}/{d.name}", str(d), type="bind", read_only=True)
                for d in kernel_packages()
            ]
            boot = await asyncio.to_thread(
                write_bootstrap, settings.bootstrap_root / session_id, plan.hostname, bootstrap
            )
            mounts.append(
                BindMount(f"{CONFIG_DIR}/bootstrap.json", str(boot), type="bind", read_only=True)
            )
        first_net = EGRESS_NETWORK if publish or public else net
        if first_net != net:
            command += [arg for subnet in egress_subnets for arg in ("--egress-subnet", subnet)]
        limits = kernel_limits(plan, settings.pids_limit)
        disk = await self._disk_option(api, plan.image)
        # No alias on the shared bridge: "main1" must resolve only inside its session.
        endpoint = api.create_endpoint_config(
            aliases=None if first_net == EGRESS_NETWORK else [plan.hostname]
        )
        what = f"cannot create kernel {plan.hostname} of session {session_id}"
        if first_net == net and net_ready is not None:
            await net_ready

        def create() -> Any:
            host_config = api.create_host_config(
                mounts=mounts,
                init=True,
                port_bindings=bindings or None,
                network_mode=first_net,
                cap_drop=["ALL"],
                cap_add=list(KEPT_CAPABILITIES),
                security_opt=["no-new-privileges"],
                storage_opt={"size": disk} if disk else None,
                log_config=settings.log_config,
                **limits,
            )
            return api.create_container(
                plan.image,
                command=command,
                name=container_name(session_id, plan.hostname),
                hostname=plan.hostname,
                labels=labels,
                environment=plan.env,
                working_dir=plan.work_dir or WORK_DIR,
                ports=[*publish, *public] or None,
                host_config=host_config,
                networking_config=api.create_networking_config({first_net: endpoint}),
            )

        try:
            created = await self.engine.run(create)
        except docker.errors.ImageNotFound as exc:
            hint = (
                "build it with `bai-jupyter image build`"
                if plan.image == DEFAULT_IMAGE
                else "pull or build it on this engine first (no registry is asked at start)"
            )
            raise AgentError(
                f"image {plan.image} not found on agent {settings.id}: {hint}"
            ) from exc
        except docker.errors.DockerException as exc:
            raise AgentError(f"{what}: {explain(exc)}") from exc
        cid = str(created["Id"])
        if first_net != net:
            if net_ready is not None:
                await net_ready
            await self.engine.call(
                f"{what}: cannot join {net}",
                api.connect_container_to_network,
                cid,
                net,
                aliases=[plan.hostname],
            )
        if not settings.local:  # a remote engine cannot see our files: copy them in
            archive = await asyncio.to_thread(bootstrap_archive, bootstrap, settings.runtime_dir)
            archives = [archive]
            if plan.role is KernelRole.MAIN:  # where %bai runs (a local engine binds it)
                archives.append(await asyncio.to_thread(package_archive, _package_copies()))
            for data in archives:
                await self.engine.call(
                    f"{what}: cannot write {plan.hostname}'s bootstrap",
                    api.put_archive,
                    cid,
                    "/",
                    data,
                )
        return cid

    async def _disk_option(self, api: Any, image: str) -> str:
        """``disk_limit`` where the storage driver takes a size, else '' (warned once).

        Probed once with a throwaway, unlabelled container: a refused kernel container
        would still send a ``destroy`` event the manager reads as the kernel's death."""
        size = self.settings.disk_limit
        if not size:
            return ""
        async with self._disk_lock:
            if self._disk_limit_works is None:

                def probe() -> str | None:
                    config = api.create_host_config(storage_opt={"size": size})
                    try:
                        made = api.create_container(image, command=["true"], host_config=config)
                    except docker.errors.ImageNotFound:
                        return ""  # the kernel's own create says so; probe again later
                    except docker.errors.APIError as exc:
                        return explain(exc)
                    api.remove_container(made["Id"], force=True)
                    return None

                error = await self.engine.call("cannot probe disk_limit", probe)
                if error:
                    self.log.warning(
                        "agent %s: disk_limit %s not applied (the storage driver "
                        "cannot limit a container's size here): %s",
                        self.settings.id,
                        size,
                        error,
                    )
                if error != "":
                    self._disk_limit_works = error is None
        return size if self._disk_limit_works else ""

    async def started(self, api: Any, plan: KernelPlan, cid: str) -> KernelStarted:
        """Read back where this host reaches a started kernel's ports."""
        if not is_main(plan):
            return KernelStarted(kernel_id=plan.kernel_id, container_id=cid)
        info = await self.engine.call(
            f"cannot inspect kernel {plan.hostname}", api.inspect_container, cid
        )
        published: dict[str, Any] = info["NetworkSettings"]["Ports"] or {}
        address = info["NetworkSettings"]["Networks"][EGRESS_NETWORK]["IPAddress"]
        publish = self.settings.publish

        def host_port(port: int) -> int:
            if not publish:
                return port  # reached at the container's own address
            for binding in published.get(f"{port}/tcp") or []:
                if binding.get("HostPort"):
                    return int(binding["HostPort"])
            raise AgentError(f"kernel {plan.hostname}: port {port} was not published")

        ports: dict[str, int] = {}
        if plan.bootstrap.get("mode") == "kernel":
            base = int(info["Config"]["Labels"][LABEL_PORT_BASE])
            ports.update({name: host_port(port) for name, port in kernel_ports(base).items()})
        ports.update({key: host_port(port) for key, port in _service_ports(plan)})
        host = self.settings.publish_ip if publish else address
        public: dict[str, tuple[str, int]] = {}
        if is_sftp(plan):
            bound = [b for b in published.get(f"{SSH_PORT}/tcp") or [] if b.get("HostPort")]
            if not bound:
                raise AgentError(f"kernel {plan.hostname}: the SFTP port was not published")
            public["sftp"] = (self._sftp_host(), int(bound[0]["HostPort"]))
        return KernelStarted(
            kernel_id=plan.kernel_id, container_id=cid, host=host, ports=ports, published=public
        )

    def _sftp_host(self) -> str:
        """The name people connect to: ``sftp_host``, else the address it is published on
        (this machine's name when that is every interface)."""
        address = self.settings.sftp_host or self.settings.sftp_address
        return socket.gethostname() if address in ("0.0.0.0", "::", "") else address

    async def find(self, api: Any, kernel_id: str) -> str:
        """The container id of a kernel (running or not); AgentError when there is none."""
        found = await self.engine.call(
            "cannot list kernels",
            api.containers,
            all=True,
            filters={"label": f"{LABEL_KERNEL}={kernel_id}"},
        )
        if not found:
            raise AgentError(f"no kernel {kernel_id} on agent {self.settings.id}")
        return str(found[0]["Id"])

    async def remove_session(self, api: Any, session_id: str) -> None:
        """Force-remove the session's containers, concurrently (idempotent)."""
        label = f"{LABEL_SESSION}={session_id}"
        containers = await self.engine.call(
            "cannot list kernels", api.containers, all=True, filters={"label": label}
        )

        def remove(cid: str) -> None:
            try:
                api.remove_container(cid, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if "already in progress" not in explain(exc):
                    raise  # else another caller is removing it: the same outcome

        await gather_all(
            [
                self.engine.call(f"cannot remove container {c['Id'][:12]}", remove, c["Id"])
                for c in containers
            ]
        )
