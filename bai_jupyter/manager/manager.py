"""``BaiSessionManager``: the one async service every front end calls.

It validates requests, enqueues them in the store, runs the scheduling loop,
drives sessions through their lifecycle and turns kernel events into state
changes; each of those jobs lives in a module of its own in this package. Front
ends reach it through :class:`bai_jupyter.api.SessionsAPI` (in process:
:class:`~bai_jupyter.manager.scoped.ScopedManager`). Every transition is written
to the store before the manager acts on it, so a restarted manager finds and
reconciles every session. Nothing here blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from traitlets.config import LoggingConfigurable

from ..agents.base import AgentBackend, AgentError
from ..agents.capped import MAX_LOG_TAIL, last_lines
from ..agents.plugins import make_agents
from ..errors import Conflict, InvalidRequest, Unavailable
from ..model import ACTIVE, Agent, ExecResult, Session, SessionType, Status
from ..resources import ResourceSlot
from ..store import Store, Transaction
from .core import Core, find_kernel
from .endpoints.replicas import ReplicaKeeper
from .endpoints.service import Endpoints
from .leader import Leadership, write_notes
from .lifecycle.start_stop import Lifecycle
from .pools.claims import PoolClaims
from .pools.config import parse_pools
from .pools.warm_pool import PoolKeeper
from .requests.admission import Admission
from .requests.launch import Launcher
from .requests.mount_check import MountCheck
from .requests.policies import Policies
from .requests.retention import Retention
from .requests.services import ServicePorts
from .requests.templates import Templates
from .requests.tokens import KernelTokens
from .requests.views import agents_view, named_reasons, queue_view
from .settings import ManagerSettings
from .usage import UsageWatch
from .watchdogs.activity import Activity
from .watchdogs.hangs import HangWatch, hang_limits
from .watchdogs.idle import IdleWatch
from .watchdogs.idle_rules import IdleFollow, IdleSettings
from .watchdogs.kernel_events import KernelWatcher
from .watchdogs.liveness import Liveness
from .watchdogs.reconcile import Reconciler
from .watchdogs.scheduling import Scheduling, load_groups
from .watchdogs.servers import ServerWatch

__all__ = ["BaiSessionManager"]


# Its traits (``c.BaiSessionManager.*``, each with its help) are in .settings.
class BaiSessionManager(ManagerSettings, LoggingConfigurable):
    """Sessions for one Jupyter server, a JupyterHub, or a command-line tool."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.core = Core(self)
        #: Extra environment of every kernel, from (session id, agent id); not stored with
        #: the session. The server extension gives kernels its address and a session token.
        self.kernel_env_hook: Callable[[str, str], Mapping[str, str]] | None = None
        #: The notebooks' host directory (the Jupyter server's root dir), trusted by the
        #: operator: mounted at NOTEBOOK_DIR in sessions whose meta names a notebook_dir.
        #: Set by the server extension (BaiJupyterApp.notebook_dir); ``None``: never.
        self.notebook_root: str | None = None
        # The parts, each given what it calls (so the imports show the calls): a part comes
        # after everything it uses. What the settings say is loaded into them at start().
        #: The ``policies`` setting, parsed: every owner's limits and idle rules.
        self.parsed_policies = Policies()
        self.idle_settings = IdleSettings({}, self.parsed_policies)
        self.activity = Activity(self.core)
        self.idle_follow = IdleFollow(self.core, self.activity, self.idle_settings)
        self.mounts = MountCheck(self.core, self)
        self.lifecycle = Lifecycle(self.core, self, self.mounts, self.idle_follow)
        self.watcher = KernelWatcher(self.core, self, self.lifecycle)
        self.hangs = HangWatch(self.core, self)
        self.reconciler = Reconciler(self.core, self, self.lifecycle, self.hangs)
        self.liveness = Liveness(self.core, self, self.lifecycle, self.reconciler)
        self.servers = ServerWatch(self.core, self, self.lifecycle)
        self.idle = IdleWatch(self.core, self, self.lifecycle, self.activity, self.idle_settings)
        policies = self.parsed_policies
        multinode = self.lifecycle.multinode
        self.admission = Admission(self.core, self, self.mounts, multinode, policies)
        self.pool_keeper = PoolKeeper(self.core, self, self.admission, self.lifecycle)
        self.pool_claims = PoolClaims(
            self.core, self.pool_keeper, self.mounts, policies, self.idle_follow
        )
        self.launcher = Launcher(self.admission, self.pool_claims)
        self.scheduling = Scheduling(self.core, self, self.lifecycle, policies, self.pool_keeper)
        self.kernel_tokens = KernelTokens(self.core)
        self.service_ports = ServicePorts(self.core)
        self.templates = Templates(self.core)
        self.retention = Retention(self.core, self)
        self.replicas = ReplicaKeeper(self.core, self.launcher, self.lifecycle, parent=self)
        self.endpoints = Endpoints(self.core, self.replicas, self.launcher)
        self.leadership = Leadership(self.core, self, self._lead)
        self.usage = UsageWatch(self.core, self)  # in every process: its own streams' charts
        #: Host listeners (address, port) kernels may reach (see allow_host_ports).
        self._host_ports: list[tuple[str, int]] = []
        self._started = False

    @property
    def store(self) -> Store | None:
        """The store, once started."""
        return self.core.store

    @property
    def started(self) -> bool:
        """Whether :meth:`start` has finished (agents known, reconciled, loops running)."""
        return self._started

    # --- lifecycle of the manager -----------------------------------------------------------

    async def start(self) -> None:
        """Open the store, register agents, reconcile, and start the scheduling loop."""
        if self._started:
            return
        core = self.core
        core.groups = load_groups(self.resource_groups)
        self.parsed_policies.load(self.policies, self.default_max_pending)
        self.idle_settings.load(self.resource_groups)
        hang_limits(self.hang_timeout)  # a bad setting stops the start, with its message
        self.pool_keeper.load(await asyncio.to_thread(parse_pools, list(self.warm_pools)))
        core.store = await asyncio.to_thread(Store, self.store_url)
        await core.follow_events(lambda: self.event_interval, lambda: self.event_retention)
        for agent in await self._make_agents():
            agent.use_scope(core.store.id)
            core.agents[agent.id] = agent
            capacity = await agent.capacity()
            record = Agent(
                agent.id, capacity, resource_group=agent.resource_group, backend=agent.backend
            )
            await core.db(partial(Transaction.put_agent, agent=record))
        await self.allow_host_ports([])  # kernels reach nothing on the host until told
        # Alone on the store (or the first), it leads before start returns: reconciled.
        await self.leadership.step()
        if self.leadership.starting is not None:
            await asyncio.wait([self.leadership.starting])
        core.spawn(self.leadership.loop(), loop=True)
        core.spawn(self.replicas.follow(), loop=True)  # every replica routes to endpoints
        interval = lambda: self.note_interval  # noqa: E731
        notes = partial(write_notes, core, self.servers, self.activity)
        core.spawn(core.every(interval, notes, "writing notes").run(), loop=True)
        self._started = True

    async def _lead(self) -> None:
        """The leader's work: reconcile, then the scheduler and the watchdogs."""
        core = self.core
        await self.reconciler.reconcile()
        loops = [self.watcher.watch(agent) for agent in core.agents.values()]
        loops += [self.scheduling.loop(), self.scheduling.follow(), self.liveness.loop()]
        loops += [self.retention.loop(), self.replicas.loop(), self.idle.loop()]
        loops += [self.hangs.loop(), self.servers.loop(), self.pool_keeper.loop()]
        for loop in loops:
            core.spawn(loop, leading=True)
        core.wake()

    async def stop(self) -> None:
        """Stop the loops and watchers; sessions keep running and are found again on start,
        but the warm pools' unclaimed sessions, which the leader ends (nobody's to keep)."""
        core = self.core
        if self._started and self.leadership.leading:
            try:
                await self.pool_keeper.drain()
            except Exception:  # stopping must complete
                self.log.exception("bai-jupyter: ending the warm pools' sessions failed")
        self._started = False
        loops = list(core.loops)
        for task in loops:
            task.cancel()
        if loops:  # ended before anything below: no round runs on a closing manager
            _, left = await asyncio.wait(loops, timeout=10)
            for task in left:
                self.log.warning("bai-jupyter: %r did not stop when cancelled", task)
        # Starts and tear-downs under way finish first: nothing is left half-removed.
        work = list(core.tasks - core.loops)
        if work:
            _, stuck = await asyncio.wait(work, timeout=self.start_timeout)
            for task in stuck:
                self.log.warning("bai-jupyter: gave up waiting for %r", task)
                task.cancel()
        for agent in core.agents.values():
            await agent.close()
        if core.store is not None:
            with contextlib.suppress(Exception):  # lost when the store does not answer
                await write_notes(core, self.servers, self.activity)
            await self.leadership.release()
        await core.stop_events()  # told to the end: tear-downs above logged theirs
        if core.tasks:
            await asyncio.wait(list(core.tasks), timeout=10)
        self.activity.close()
        core.agents.clear()
        if core.store is not None:
            core.store.close()

    async def agents_now(self) -> dict[str, ResourceSlot]:
        """The capacity of each agent this configuration gives, asked now (nothing started)."""
        agents = await self._make_agents()
        try:
            return {agent.id: await agent.capacity() for agent in agents}
        finally:
            for agent in agents:
                await agent.close()

    async def _make_agents(self) -> list[AgentBackend]:
        """The agents this configuration gives, each configured by its class config."""
        return await make_agents(list(self.agents), self.backend, parent=self)

    def wake(self) -> None:
        """Ask for a scheduling pass now."""
        self.core.wake()

    async def host_addresses(self) -> dict[str, str]:
        """Agent id → the address its kernels reach this host at, for agents that have one."""
        found: dict[str, str] = {}
        for agent in self.core.agents.values():
            try:
                address = await agent.host_address()
            except AgentError as exc:
                self.log.warning("bai-jupyter: agent %s: %s", agent.id, exc)
                continue
            if address:
                found[agent.id] = address
        return found

    async def allow_host_ports(self, listeners: Iterable[tuple[str, int]]) -> None:
        """Let kernels reach only these (address, port) of this host (the kernel-access
        listeners); each agent allows those at its kernels' own host address."""
        self._host_ports = sorted(set(self._host_ports) | set(listeners))
        for agent in self.core.agents.values():
            try:
                await agent.allow_host_ports(list(self._host_ports))
            except AgentError as exc:
                self.log.warning("bai-jupyter: agent %s: host firewall: %s", agent.id, exc)

    # --- sessions -----------------------------------------------------------------------------

    async def create(
        self,
        request: Mapping[str, Any],
        owner: str,
        template: str | None = None,
        meta: Mapping[str, Any] | None = None,
        dry_run: bool = False,
        groups: Sequence[str] | None = None,
        admin: bool = False,
    ) -> Session:
        """Validate a request (over a template), enqueue it, and return the PENDING session.

        ``dry_run``: every check, defaults filled in, nothing stored or started.
        ``groups``: the owner's user groups (``None``: as last known); ``admin``: the
        caller is an admin (see ``admin_host_paths``)."""
        return await self.launcher.create(request, owner, template, meta, dry_run, groups, admin)

    async def get(self, key: str, owner: str | None = None) -> Session:
        """A session by id or by name (names need the owner); NotFound otherwise. The
        sessions its why-pending names read as they are now (``named_reasons``)."""
        return (await named_reasons(self.core, [await self.core.get(key, owner)]))[0]

    async def list_sessions(
        self, owner: str | None = None, statuses: Iterable[Status] | None = None
    ) -> list[Session]:
        """Sessions, oldest first, of one owner (or everyone's) in the given statuses."""
        return await named_reasons(self.core, await self.core.list_sessions(owner, statuses))

    async def destroy(
        self, key: str, owner: str | None = None, reason: str = "user-requested", by: str = ""
    ) -> Session:
        """Cancel a pending session, or terminate a starting or running one (``by``: who)."""
        return await self.lifecycle.destroy(key, owner, reason, by)

    async def purge(self, key: str, owner: str | None = None) -> Session:
        """Delete an ended session's record (its logs too); Conflict while it has not ended."""
        return await self.retention.purge(key, owner)

    async def wait_for(
        self,
        key: str,
        statuses: Iterable[Status],
        timeout: float | None = None,
        owner: str | None = None,
    ) -> Session:
        """Wait until the session is in one of ``statuses`` or has ended; Timeout otherwise."""
        session = await self.core.wait_for(key, statuses, timeout, owner)
        return (await named_reasons(self.core, [session]))[0]

    async def logs(
        self, key: str, kernel: str = "main1", owner: str | None = None, tail: int | None = None
    ) -> str:
        """A kernel's last ``tail`` lines (default ``log_tail``) within ``log_limit`` bytes:
        live while it runs (read from the agent as a stream), kept in the store after."""
        lines = self.log_tail if tail is None else tail
        if not 1 <= lines <= MAX_LOG_TAIL:
            raise InvalidRequest(
                f"tail: must be 1 to {MAX_LOG_TAIL} lines, got {lines}", field="tail"
            )
        session = await self.get(key, owner)
        target = find_kernel(session, kernel)
        kept = await self.core.query(lambda tx: tx.get_logs(target.id))
        if kept is not None:
            return last_lines(kept, lines)
        agent = self.core.agents.get(target.agent_id or "")
        if agent is None or target.container_id is None:
            return ""
        try:
            return await agent.logs(target.id, lines, self.log_limit)
        except AgentError as exc:
            raise Unavailable(str(exc)) from exc

    async def exec(
        self,
        key: str,
        command: list[str],
        kernel: str = "main1",
        owner: str | None = None,
        timeout: float = 60,
    ) -> ExecResult:
        """Run a command in one kernel of a running session (not an inference replica's)."""
        session = await self.get(key, owner)
        if session.spec.type is SessionType.INFERENCE:
            raise InvalidRequest(
                f"session {session.id} is an inference session: it runs its model server and "
                "no other code (its logs show the server's output)"
            )
        agent, kernel_id = await self.core.running_kernel(session.id, kernel, owner)
        self.activity.touch(session.id, "exec")
        try:
            return await agent.exec(kernel_id, command, timeout, self.exec_output_limit)
        except AgentError as exc:
            raise Unavailable(str(exc)) from exc

    async def signal(
        self, key: str, signum: int, kernel: str = "main1", owner: str | None = None
    ) -> None:
        """Send a signal to a kernel's runtime (INT interrupts, HUP restarts the ipykernel)."""
        agent, kernel_id = await self.core.running_kernel(key, kernel, owner)
        self.activity.touch((await self.get(key, owner)).id, "signal")
        try:
            await agent.signal(kernel_id, signum)
        except AgentError as exc:
            raise Unavailable(str(exc)) from exc

    async def add_service_port(
        self, key: str, service_port: str, owner: str | None = None
    ) -> Session:
        """Declare ``name:proto:port`` on a RUNNING session's main1, for the proxy."""
        return await self.service_ports.add(key, service_port, owner)

    async def touch(self, key: str, source: str = "api", owner: str | None = None) -> Session:
        """Note activity on a running session (the idle_timeout rule): ``source`` says what
        (``execute``, ``proxy``, ``api`` …). Conflict unless it is running."""
        session = await self.get(key, owner)
        if session.status not in ACTIVE:
            raise Conflict(f"session {session.id} is {session.status.value}, not RUNNING")
        self.activity.touch(session.id, source)
        return session

    def server_alive(self, owner: str, server: str) -> float:
        """``owner``'s Jupyter server ``server`` is alive (its heartbeat); the seconds
        until the next one is due."""
        self.servers.alive(owner, server)
        return self.servers.every()

    def events(self, since: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """Session changes as they happen, made by any process on the store (until the
        caller stops iterating); ``since``: first those logged after that ``seq``."""
        return self.core.hub.events(since)

    # --- views of the agents and the queue ----------------------------------------------------

    async def agents_view(self, owner: str, admin: bool = False) -> list[dict[str, Any]]:
        """Every agent's capacity, occupied and free slots, and kernels (others' anonymous)."""
        return await agents_view(self.core, owner, admin)

    async def pools_view(self, admin: bool = False) -> list[dict[str, Any]]:
        """The warm pools and their counts; which sessions they hold, for an admin."""
        pools = await self.pool_keeper.view()
        return pools if admin else [{k: v for k, v in p.items() if k != "sessions"} for p in pools]

    async def queue_view(self, owner: str, admin: bool = False) -> dict[str, Any]:
        """Each resource group's settings and pending queue in the next pass's order."""
        queues = {
            group: await named_reasons(self.core, queue)
            for group, queue in (await self.scheduling.queues()).items()
        }
        settings = {name: dict(conf) for name, conf in dict(self.resource_groups).items()}
        passes = {name: stats.to_json() for name, stats in self.scheduling.stats.items()}
        return queue_view(queues, settings, owner, admin, passes)
