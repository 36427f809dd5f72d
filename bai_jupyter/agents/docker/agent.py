"""``DockerAgent``: one Docker engine as an agent, tying its parts together.

The engine client (``engine``), the bridges (``networks``), the containers
(``containers``), the host firewall (``firewall``) and the event thread
(``watcher``) each do one job; this class orders the steps of starting and
removing a session. Its options are the ``options`` mixin, its part in sessions
spread over several agents (the Swarm, images, host files) the ``multinode`` one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docker.errors
from jupyter_core.paths import jupyter_runtime_dir

from ...kernel_plan import LABEL_KERNEL, LABEL_ROOT, LABEL_SESSION, KernelPlan
from ...model import ExecResult, KernelRole
from ...resources import ResourceSlot
from ..base import AgentError, KernelStarted, LiveKernel
from ..capped import EXEC_OUTPUT_LIMIT, LOG_BYTES_LIMIT
from ..usage import KernelReading
from .bootstrap import precompile_runtime
from .containers import KernelContainers, is_main
from .engine import Engine, engine_answers, gather_all, sees_our_files, unix_socket
from .firewall import HostFirewall
from .host_access import DockerHostAccess
from .images import EngineImages
from .multinode import DockerMultiNode
from .networks import EGRESS_NETWORK, Networks, network_name
from .output import exec_capped, follow_output, read_logs
from .stats import StatsStreams
from .swarm import SwarmMembership
from .watcher import EventWatcher, Removals

__all__ = ["DockerAgent"]


class DockerAgent(DockerHostAccess, DockerMultiNode):
    """One Docker engine (local socket or remote endpoint) as an agent.

    ``endpoint``, ``publish_ports`` and ``address`` are read when the agent is made."""

    backend = "docker"
    ssh = True
    sftp = True
    auto_rank = 0
    unavailable_reason = "no Docker engine answered"

    def __init__(self, agent_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(agent_id, **kwargs)
        #: Whether the engine sees this machine's files (binds of our paths work).
        self.local = sees_our_files(self.endpoint)
        #: Publish main1's ports on 127.0.0.1, or reach them at its bridge address. A
        #: Linux host routes to its own bridges, which spares the engine's per-port
        #: proxy process (~60 ms per start, a hop on every message); elsewhere publish.
        self.publish: bool = (
            self.publish_ports
            if self.publish_ports is not None
            else bool(self.address) or not (self.local and sys.platform.startswith("linux"))
        )
        if self.publish and self.firewalled and os.geteuid() == 0:
            # Every local user reaches a port published on loopback (through the engine's
            # proxy, as root): with the host firewall, main1 is reached on its bridge only.
            self.log.warning(
                "agent %s: publish_ports ignored: the host firewall keeps kernels' ports from "
                "other local users, which ports published on 127.0.0.1 are not",
                self.id,
            )
            self.publish = False
        #: Where published ports listen (and the manager connects).
        self.publish_ip = self.address or "127.0.0.1"
        #: Where the bootstrap files of a local engine's kernels live until destroy.
        self.bootstrap_root = Path(jupyter_runtime_dir()) / "bai_jupyter" / "bootstrap"
        self.engine = Engine(self.id, self.endpoint, self.tls_cert_path)
        self.networks = Networks(self.engine)
        self.containers = KernelContainers(self, self.engine, self.log)
        self._stats = StatsStreams(self.engine.new_client)
        self.images = EngineImages(self.engine)
        self.swarm = SwarmMembership(self.engine)
        self._firewall = HostFirewall(self)
        self._session_locks: dict[str, asyncio.Lock] = {}
        self._removals = Removals()
        #: The runtime's bytecode was made (once per agent; see ``precompile_runtime``).
        self._runtime_compiled = False
        self._watcher: EventWatcher | None = None

    # -- the engine ----------------------------------------------------------------------

    @classmethod
    async def engine_answers(cls, endpoint: str | None = None, timeout: float = 3) -> bool:
        """Whether a Docker engine answers a ping at ``endpoint`` within ``timeout`` seconds."""
        return await engine_answers(endpoint, timeout)

    async def available(self) -> bool:
        return await engine_answers(self.endpoint, tls_dir=self.tls_cert_path)

    async def reconnect(self) -> None:
        """A new client and a new event stream (from the last event seen)."""
        await self.engine.reconnect()
        if self._watcher is not None:
            self._watcher.renew()

    def announce(self, why: str) -> None:
        """One line, named or chosen by ``auto``: the engine answered either way."""
        self.log.info("bai-jupyter: kernels run in Docker (the local engine answered)")

    async def machine_slots(self) -> ResourceSlot:
        api = await self.engine.api()
        info = await self.engine.call(f"agent {self.id}: docker info", api.info)
        return ResourceSlot({"cpu": int(info["NCPU"]), "mem": int(info["MemTotal"])})

    async def has_image(self, image: str) -> bool:
        return await self.images.info(image) is not None

    # -- the host ------------------------------------------------------------------------

    async def host_address(self) -> str | None:
        """``manager_address``, else the egress bridge's gateway on an engine of this host's
        network (one reached at an ``address`` or remote: ``None``)."""
        if self.manager_address:
            return self.manager_address
        return await self.networks.gateway() if self.local and not self.address else None

    @property
    def shares_host_files(self) -> bool:
        return self.local

    def private_paths(self) -> list[str]:
        """Bootstrap files (session keys), the runtime, and the engine's own socket."""
        socket_path = unix_socket(self.endpoint)
        return [
            str(self.bootstrap_root),
            str(self.runtime_dir),
            socket_path or "/var/run/docker.sock",
        ]

    def late_port(self, port: int) -> int | None:
        """Reached at main1's own address: any port works. Published: Docker cannot add one."""
        return None if self.publish else port

    # -- sessions ------------------------------------------------------------------------

    def _lock(self, session_id: str) -> asyncio.Lock:
        """Start and destroy of one session never interleave (no half-removed leftovers)."""
        return self._session_locks.setdefault(session_id, asyncio.Lock())

    async def start_kernels(self, session_id: str, plans: list[KernelPlan]) -> list[KernelStarted]:
        """Create every kernel's container, then start main1, then the rest; on any failure
        remove what exists of the session here and raise :class:`AgentError`."""
        api = await self.engine.api()
        if not self._runtime_compiled:
            self._runtime_compiled = True
            await asyncio.to_thread(precompile_runtime, Path(self.runtime_dir))
        async with self._lock(session_id):
            try:
                started = await self._start(api, session_id, plans)
                for plan, kernel in zip(plans, started):
                    if is_main(plan):
                        await self._let_in(session_id, plan.labels, kernel.container_id)
                return started
            except BaseException as exc:
                # Cancelled or failed: nothing of the session may stay behind.
                try:
                    await asyncio.shield(self._remove_session(api, session_id))
                except Exception as cleanup:  # report the first failure, not this one
                    self.log.warning(
                        "agent %s: clean-up of %s failed: %s", self.id, session_id, cleanup
                    )
                self.networks.egress_ready = False
                if isinstance(exc, AgentError) or not isinstance(exc, Exception):
                    raise
                raise AgentError(f"cannot start session {session_id}: {exc}") from exc

    async def _start(
        self, api: Any, session_id: str, plans: list[KernelPlan]
    ) -> list[KernelStarted]:
        # Spread over several agents: the manager made the session's overlay. Else a session
        # of one kernel has nobody to talk to privately: no session network.
        overlay = plans[0].network if plans else None
        net = overlay or (EGRESS_NETWORK if len(plans) == 1 else network_name(session_id))
        # Made while main1 is created on the egress bridge; sub kernels wait for it.
        net_ready = (
            None
            if overlay or net == EGRESS_NETWORK
            else self.networks.session_network(api, session_id)
        )
        subnets: tuple[str, ...] = ()
        if net == EGRESS_NETWORK or any(map(is_main, plans)):
            await self.networks.ensure_egress(api)
            if net != EGRESS_NETWORK:  # main1 is on both: its own name must mean net
                subnets = tuple(await self.networks.egress_subnets())
        try:
            created = await gather_all(
                [
                    self.containers.create(api, session_id, net, plan, net_ready, subnets)
                    for plan in plans
                ]
            )
        finally:
            if net_ready is not None:  # settle it, so that a clean-up sees the network
                await asyncio.gather(net_ready, return_exceptions=True)
        # main1 first: its ipykernel boots while the engine starts the others (the engine
        # starts a session's containers largely one after another, whatever we send at once).
        for first in (True, False):
            await gather_all(
                [
                    self.engine.call(f"cannot start kernel {plan.hostname}", api.start, cid)
                    for plan, cid in zip(plans, created)
                    if (plan.role is KernelRole.MAIN) is first
                ]
            )
        return await gather_all(
            [self.containers.started(api, plan, cid) for plan, cid in zip(plans, created)]
        )

    async def destroy_session(self, session_id: str) -> None:
        api = await self.engine.api()
        async with self._lock(session_id):
            await self._remove_session(api, session_id)
        self._session_locks.pop(session_id, None)

    async def _remove_session(self, api: Any, session_id: str) -> None:
        """Force-remove the session's containers, then its networks and bootstrap files.

        Their die/destroy events then carry ``detail={"requested": True}``, so the
        manager can tell its own removal from a kill from outside."""
        self._removals.mark(session_id)
        await self.containers.remove_session(api, session_id)
        await self._firewall.forget(session_id)
        await self.networks.remove_session(api, session_id)
        # The bootstrap files (they hold the session's keys) go with the kernels.
        await asyncio.to_thread(shutil.rmtree, self.bootstrap_root / session_id, True)

    # -- single kernels ------------------------------------------------------------------

    async def logs(
        self, kernel_id: str, tail: int | None = None, limit: int = LOG_BYTES_LIMIT
    ) -> str:
        """Asked of the engine with its own ``tail``, read as a stream within ``limit``."""
        api = await self.engine.api()
        cid = await self.containers.find(api, kernel_id)
        return await read_logs(
            self.engine, cid, tail, limit, f"cannot read logs of kernel {kernel_id}"
        )

    async def wait_for_output(self, kernel_id: str, text: str, timeout: float) -> bool:
        """Follows the kernel's log stream (:mod:`.output`) rather than polling its logs;
        over ``ssh://`` (where the SDK cannot end a followed stream) it polls."""
        if (self.endpoint or "").startswith("ssh://"):
            return await super().wait_for_output(kernel_id, text, timeout)
        api = await self.engine.api()
        cid = await self.containers.find(api, kernel_id)
        return await follow_output(self.engine, cid, text, timeout)

    async def exec(
        self,
        kernel_id: str,
        command: list[str],
        timeout: float = 60,
        limit: int = EXEC_OUTPUT_LIMIT,
    ) -> ExecResult:
        """Run ``command`` in the kernel; exit code 124 means it ran past ``timeout``.

        The time limit is enforced inside (coreutils ``timeout`` when the image has
        it, so the process really ends) and outside (we stop reading and raise). The
        output is read as it comes; its last ``limit`` bytes are kept."""
        api = await self.engine.api()
        cid = await self.containers.find(api, kernel_id)
        what = f"cannot exec in kernel {kernel_id}"
        code, output, dropped = await exec_capped(self.engine, cid, command, timeout, limit, what)
        return ExecResult(code, output.decode(errors="replace"), dropped)

    async def signal(self, kernel_id: str, signum: int) -> None:
        api = await self.engine.api()
        cid = await self.containers.find(api, kernel_id)
        await self.engine.call(f"cannot signal kernel {kernel_id}", api.kill, cid, signal=signum)

    async def cpu_seconds(self, session_id: str) -> float | None:
        """The CPU time of the session's running containers here (the engine's one-shot
        stats: the cgroup's counter)."""
        api = await self.engine.api()
        label = f"{LABEL_SESSION}={session_id}"
        found = await self.engine.call(
            "cannot list kernels", api.containers, filters={"label": label}
        )

        def used(cid: str) -> float:
            try:
                stats = api.stats(cid, stream=False, one_shot=True)
                return float(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9
            except docker.errors.NotFound:
                return 0.0  # removed meanwhile
            except (ValueError, KeyError, TypeError) as exc:  # stopping: an empty answer
                raise AgentError(f"no CPU stats of {cid[:12]}: {exc}") from exc

        totals = await gather_all(
            [self.engine.call(f"cannot read stats of {c['Id'][:12]}", used, c["Id"]) for c in found]
        )
        return sum(totals)

    async def usage(self, kernels: Mapping[str, str | None]) -> list[KernelReading]:
        """The latest sample of each kernel's container from its stats stream (``stats``)."""
        containers = {k: cid for k, cid in kernels.items() if cid}
        if not containers:
            return []
        return await self.engine.call("cannot read stats", self._stats.readings, containers)

    async def live_kernels(self) -> list[LiveKernel]:
        """Every container with our labels, running or not, with its exit code.

        States come from inspecting each container: the list endpoint's view lags
        behind a ``die`` event for a moment, inspect does not."""
        api = await self.engine.api()
        found = await self.engine.call(
            "cannot list kernels", api.containers, all=True, filters={"label": LABEL_ROOT}
        )
        ours = [
            c["Id"] for c in found if {LABEL_SESSION, LABEL_KERNEL} <= set(c.get("Labels") or {})
        ]

        def inspect(cid: str) -> dict[str, Any] | None:
            try:
                info: dict[str, Any] = api.inspect_container(cid)
            except docker.errors.NotFound:
                return None  # removed meanwhile
            return info

        infos = await gather_all(
            [self.engine.call(f"cannot inspect {cid[:12]}", inspect, cid) for cid in ours]
        )
        kernels: list[LiveKernel] = []
        for info in infos:
            if info is None:
                continue
            labels, state = info["Config"]["Labels"], info["State"]
            running = bool(state["Running"])
            kernels.append(
                LiveKernel(
                    session_id=labels[LABEL_SESSION],
                    kernel_id=labels[LABEL_KERNEL],
                    container_id=info["Id"],
                    running=running,
                    exit_code=None if running else int(state["ExitCode"]),
                    labels=dict(labels),
                )
            )
        return kernels

    # -- events and closing --------------------------------------------------------------

    def _watch_events(self) -> None:
        """Start the thread that reads the engine's events from now on (once)."""
        if self._watcher is None:
            loop = asyncio.get_running_loop()
            self._watcher = EventWatcher(self.engine, self._removals, loop, self._report, self.log)
            self._watcher.start()

    async def _release(self) -> None:
        """Drop the client (later calls say the agent is closed), stop the watcher thread,
        take our firewall rules out."""
        await self.engine.close()
        await asyncio.to_thread(self._stats.close)
        if self._watcher is not None:
            self._watcher.stop()
            await asyncio.to_thread(self._watcher.join, 5)
        await self._firewall.remove()
