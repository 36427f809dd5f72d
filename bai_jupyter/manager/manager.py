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
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from traitlets import Bool, Dict, Float, Int, List, Unicode
from traitlets.config import LoggingConfigurable

from ..agents.base import AgentBackend, AgentError
from ..agents.plugins import make_agents
from ..errors import Conflict, InvalidRequest, Unavailable
from ..model import Agent, ExecResult, Session, SessionType, Status
from ..mounts import MountPolicy
from ..resources import ResourceSlot
from ..runtime.protocol import DEFAULT_IMAGE
from ..scheduler.config import OwnerPolicy
from ..store import Store, Transaction
from .activity import Activity
from .admission import Admission
from .core import ACTIVE, Core, find_kernel
from .endpoints import Endpoints
from .hangs import HangWatch, hang_limits
from .idle import IdleSettings, IdleWatch
from .lifecycle import Lifecycle
from .liveness import Liveness
from .mount_check import MountCheck
from .policies import Policies
from .reconcile import Reconciler
from .replicas import ReplicaKeeper
from .scheduling import Scheduling, load_groups
from .services import ServicePorts
from .templates import Templates
from .tokens import KernelTokens
from .views import agents_view, queue_view
from .watch import KernelWatcher

__all__ = ["BaiSessionManager"]


class BaiSessionManager(LoggingConfigurable):
    """Sessions for one Jupyter server, a JupyterHub, or a command-line tool."""

    store_url = Unicode(
        None,
        allow_none=True,
        config=True,
        help="SQLAlchemy URL of the store; default: a SQLite file in the Jupyter data dir.",
    )
    backend = Unicode(
        "auto",
        config=True,
        help="The backend of the one agent made when `agents` is empty: a name in the "
        "entry-point group bai_jupyter.agents ('docker': containers, configured as "
        "c.DockerAgent; 'local': processes, c.LocalAgent), or 'auto': Docker when an "
        "engine answers, else local.",
    )
    agents = List(
        Dict(),
        config=True,
        help="Agents, each {'backend': name (default 'docker'), **options}: the options "
        "are traits of that backend's class, set over its class config (DockerAgent: id, "
        "resource_group, slots, reserve, endpoint, publish_ports, disk_limit, "
        "host_firewall, pids_limit …; LocalAgent: id, resource_group, slots, reserve, "
        "root …). Empty: one agent chosen by `backend`.",
    )
    resource_groups = Dict(
        {"default": {"sequencer": "fifo", "selector": "concentrated", "options": {}}},
        config=True,
        help="Resource groups: name → {'sequencer', 'selector', 'options'} "
        "(see docs/scheduler.md).",
    )
    default_image = Unicode(
        DEFAULT_IMAGE,
        config=True,
        help="Kernel image for requests that name none (build it: `bai-jupyter image build`).",
    )
    data_folders_root = Unicode(
        "",
        config=True,
        help="Where named data folders live (<root>/<owner>/<name>); "
        "default: <jupyter data dir>/bai_jupyter/folders.",
    )
    allowed_host_paths = List(
        Unicode(),
        config=True,
        help="Host path prefixes sessions may mount, each '/prefix' or '/prefix:ro' "
        "(read-only for everything under it). Default: none (only the owner's data "
        "folders). Never mountable, even here: /proc, /sys, /dev, /run, the container "
        "engines' sockets and state, the store's directory, the Jupyter runtime and data "
        "dirs, this package and its runtime, and other users' data folders. "
        "See docs/security-mounts in the README.",
    )
    policies = Dict(
        {},
        config=True,
        help="Per-user and per-group limits: {'default': {...}, 'groups': {NAME: {...}}, "
        "'users': {NAME: {...}}}, each entry with any of max_concurrent_sessions, "
        "max_resources ({slot: amount}), max_pending, allowed_resource_groups, "
        "allowed_images (patterns), and the idle rules idle_timeout, session_lifetime "
        "(seconds, 0: off) and utilization ({'cpu_percent', 'window'}, 0: off), which win "
        "over a resource group's `idle`. A user's own entry wins, else the most generous of "
        "their groups', else default. Groups are a JupyterHub's (see docs/jupyterhub.md).",
    )
    admin_host_paths = Bool(
        False,
        config=True,
        help="Admins (bai_jupyter:admin, e.g. a JupyterHub's admins) may mount any host "
        "path that exists, not only those under allowed_host_paths; what is never "
        "mountable stays so. Off: everyone is held to allowed_host_paths.",
    )
    pass_interval = Float(5.0, config=True, help="Seconds between periodic scheduling passes.")
    start_timeout = Float(
        120.0, config=True, help="Seconds an agent may take to start a session's kernels."
    )
    ended_retention = Float(
        7 * 86400.0,
        config=True,
        help="Seconds an ended session's record (status, history, kernels' logs) is kept "
        "after it ended; older ones are deleted every retention_interval. 0: keep forever.",
    )
    retention_interval = Float(
        3600.0, config=True, help="Seconds between deletions of ended sessions past retention."
    )
    log_limit = Int(
        1 << 20, config=True, help="Characters of each kernel's log kept after it ends."
    )
    watchdog_interval = Float(
        5.0,
        config=True,
        help="Seconds between looks at running sessions' idle rules (activity, CPU use, "
        "lifetime) and at sessions stuck starting or ending (hang_timeout). The time left "
        "shown by the API is as fresh as this.",
    )
    hang_timeout = Dict(
        {},
        config=True,
        help="Seconds a session may stay in each of PREPARING, PULLING, CREATING and "
        "TERMINATING before it is forced to ERROR (hang-timeout) and its kernels and "
        "networks are removed, e.g. {'CREATING': 600}; the states left out keep their "
        "default (PULLING 1800, the others 300); 0: no limit. Read at every check.",
    )
    agent_lost_timeout = Float(
        60.0,
        config=True,
        help="Seconds an agent may go without answering before it is lost: its sessions "
        "end ERROR 'agent-lost' and nothing is placed there until it answers again (then "
        "its kernels of ended sessions are removed).",
    )
    agent_check_interval = Float(
        2.0, config=True, help="Seconds between checks that every agent answers."
    )

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
        self.mounts = MountCheck(self.core, self)
        self.lifecycle = Lifecycle(self.core, self, self.mounts)
        self.watcher = KernelWatcher(self.core, self, self.lifecycle)
        self.hangs = HangWatch(self.core, self)
        self.reconciler = Reconciler(self.core, self, self.lifecycle, self.hangs)
        self.liveness = Liveness(self.core, self, self.lifecycle, self.reconciler)
        self.limits = Policies({})
        self.activity = Activity(self.core)
        self.idle_settings = IdleSettings({}, self.limits)
        self.idle = IdleWatch(
            self.core, self, self.lifecycle, self.activity, lambda: self.idle_settings
        )
        self.lifecycle.before_running = self.idle.before_running
        self.scheduling = Scheduling(self.core, self.lifecycle.start, self._owner_policy)
        self.kernel_tokens = KernelTokens(self.core)
        self.admission = Admission(self.core, self, self.mounts, self.lifecycle.multinode)
        self.service_ports = ServicePorts(self.core)
        self.templates = Templates(self.core)
        self.replicas = ReplicaKeeper(
            self.core,
            lambda request, owner, meta: self.admission.create(request, owner, meta=meta),
            lambda session_id, reason: self.lifecycle.destroy(session_id, None, reason),
            parent=self,
        )
        self.endpoints = Endpoints(
            self.core,
            self.replicas,
            lambda request, owner, groups, admin: self.admission.create(
                request, owner, dry_run=True, groups=groups, admin=admin
            ),
        )
        #: Host ports kernels may reach (see allow_host_ports).
        self._host_ports: list[int] = []
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
        self.limits = Policies(self.policies)
        self.idle_settings = IdleSettings(self.resource_groups, self.limits)
        hang_limits(self.hang_timeout)  # a bad setting stops the start, with its message
        core.store = await asyncio.to_thread(Store, self.store_url)
        for agent in await self._make_agents():
            core.agents[agent.id] = agent
            capacity = await agent.capacity()
            record = Agent(
                agent.id, capacity, resource_group=agent.resource_group, backend=agent.backend
            )
            await core.db(partial(Transaction.put_agent, agent=record))
        await self.reconciler.reconcile()
        await self.allow_host_ports([])  # kernels reach nothing on the host until told
        for agent in core.agents.values():
            core.spawn(self.watcher.watch(agent), loop=True)
        core.spawn(self.scheduling.loop(lambda: self.pass_interval), loop=True)
        core.spawn(self.liveness.loop(), loop=True)
        core.spawn(self._retention_loop(), loop=True)
        core.spawn(self.replicas.loop(), loop=True)
        core.spawn(self.replicas.follow(), loop=True)
        core.spawn(self.idle.loop(), loop=True)
        core.spawn(self.hangs.loop(), loop=True)
        self._started = True
        core.wake()

    async def stop(self) -> None:
        """Stop the loops and watchers; sessions keep running and are found again on start."""
        self._started = False
        core = self.core
        for task in core.loops:
            task.cancel()
        # Starts and tear-downs under way finish first: nothing is left half-removed.
        work = list(core.tasks - core.loops)
        if work:
            _, stuck = await asyncio.wait(work, timeout=self.start_timeout)
            for task in stuck:
                self.log.warning("bai-jupyter: gave up waiting for %r", task)
                task.cancel()
        for agent in core.agents.values():
            await agent.close()
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

    async def schedule_now(self) -> None:
        """One scheduling pass over every resource group, now; start what was placed."""
        await self.scheduling.pass_now()

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

    async def allow_host_ports(self, ports: Iterable[int]) -> None:
        """Let kernels reach only these ports of this host (the kernel-access listeners)."""
        self._host_ports = sorted(set(self._host_ports) | set(ports))
        for agent in self.core.agents.values():
            try:
                await agent.allow_host_ports(list(self._host_ports))
            except AgentError as exc:
                self.log.warning("bai-jupyter: agent %s: host firewall: %s", agent.id, exc)

    def mount_policy(self, trusted: Iterable[str] = ()) -> MountPolicy:
        """The allow-list (plus ``trusted`` prefixes) and what is never mountable."""
        return self.mounts.policy(trusted)

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
        return await self.admission.create(request, owner, template, meta, dry_run, groups, admin)

    def _owner_policy(
        self, owner: str, groups: Sequence[str], fallback: OwnerPolicy
    ) -> OwnerPolicy:
        """The scheduler's limits for ``owner``: the policies', else the group's own."""
        return self.limits.for_owner(owner, groups).scheduler_policy(fallback)

    async def get(self, key: str, owner: str | None = None) -> Session:
        """A session by id or by name (names need the owner); NotFound otherwise."""
        return await self.core.get(key, owner)

    async def list_sessions(
        self, owner: str | None = None, statuses: Iterable[Status] | None = None
    ) -> list[Session]:
        """Sessions, oldest first, of one owner (or everyone's) in the given statuses."""
        return await self.core.list_sessions(owner, statuses)

    async def destroy(
        self, key: str, owner: str | None = None, reason: str = "user-requested"
    ) -> Session:
        """Cancel a pending session, or terminate a starting or running one."""
        return await self.lifecycle.destroy(key, owner, reason)

    async def purge(self, key: str, owner: str | None = None) -> Session:
        """Delete an ended session's record (its logs too); Conflict while it has not ended."""
        session = await self.get(key, owner)
        if not session.status.is_terminal:
            raise Conflict(
                f"session {session.id} is {session.status.value}: only an ended session's "
                "record can be deleted; end it first (DELETE without purge)"
            )
        await self.core.db(lambda tx: tx.delete_sessions([session.id]))
        return session

    async def purge_ended(self, older_than: float) -> int:
        """Delete the records of sessions that ended more than ``older_than`` seconds ago."""
        cutoff = time.time() - older_than
        ended = await self.list_sessions(statuses=[s for s in Status if s.is_terminal])
        old = [s.id for s in ended if (s.status_history[-1].at if s.status_history else 0) < cutoff]
        return await self.core.db(lambda tx: tx.delete_sessions(old)) if old else 0

    async def _retention_loop(self) -> None:
        """Ended sessions do not pile up: delete those past ``ended_retention``."""
        while self.ended_retention > 0:
            try:
                gone = await self.purge_ended(self.ended_retention)
            except Exception:
                self.log.exception("bai-jupyter: deleting ended sessions failed")
            else:
                if gone:
                    self.log.info("bai-jupyter: deleted %d ended sessions past retention", gone)
            await asyncio.sleep(max(self.retention_interval, 1.0))

    async def wait_for(
        self,
        key: str,
        statuses: Iterable[Status],
        timeout: float | None = None,
        owner: str | None = None,
    ) -> Session:
        """Wait until the session is in one of ``statuses`` or has ended; Timeout otherwise."""
        return await self.core.wait_for(key, statuses, timeout, owner)

    async def logs(self, key: str, kernel: str = "main1", owner: str | None = None) -> str:
        """A kernel's output: live while it runs, kept in the store after it ends."""
        session = await self.get(key, owner)
        target = find_kernel(session, kernel)
        kept = await self.core.query(lambda tx: tx.get_logs(target.id))
        if kept is not None:
            return kept
        agent = self.core.agents.get(target.agent_id or "")
        if agent is None or target.container_id is None:
            return ""
        try:
            return await agent.logs(target.id)
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
            return await agent.exec(kernel_id, command, timeout)
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

    def events(self) -> AsyncIterator[dict[str, Any]]:
        """Session status changes as they happen (until the caller stops iterating)."""
        return self.core.hub.events()

    # --- templates ----------------------------------------------------------------------------

    # --- views of the agents and the queue ----------------------------------------------------

    async def agents_view(self, owner: str, admin: bool = False) -> list[dict[str, Any]]:
        """Every agent's capacity, occupied and free slots, and kernels (others' anonymous)."""
        return await agents_view(self.core, owner, admin)

    async def queue_view(self, owner: str, admin: bool = False) -> dict[str, Any]:
        """Each resource group's settings and pending queue in the next pass's order."""
        queues = await self.scheduling.queues()
        settings = {name: dict(conf) for name, conf in dict(self.resource_groups).items()}
        return queue_view(queues, settings, owner, admin)
