"""The session manager: the one async service every front end calls.

It validates requests, enqueues them in the store, runs the scheduling loop
(a pass on every enqueue, every termination and every ``pass_interval``),
drives the agents through PREPARING … RUNNING … TERMINATED, and turns kernel
events into state changes. Every transition is written to the store before the
manager acts on it, so a restarted manager finds and reconciles every session.
Store and engine calls run in threads: nothing here blocks the event loop.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from traitlets import Bool, Dict, Enum, Float, Int, List, Unicode
from traitlets.config import LoggingConfigurable

from .agents.base import (
    AgentBackend,
    AgentError,
    ExecResult,
    KernelEvent,
    KernelEventKind,
    KernelStarted,
)
from .cluster import (
    LABEL_SCOPE,
    NOTEBOOK_DIR,
    WORK_DIR,
    KernelPlan,
    Mount,
    MountPolicy,
    MountRefused,
    bootstrap,
    generate_ssh_keys,
    kernel_environ,
    labels,
    parse_mount,
)
from .errors import Conflict, InvalidRequest, NotFound, Timeout, Unavailable
from .model import (
    STARTING,
    TRANSITIONS,
    Agent,
    IllegalTransition,
    Kernel,
    KernelRole,
    Session,
    SessionType,
    Status,
)
from .queues import put_dropping_oldest
from .resources import ResourceError, ResourceSlot
from .scheduler import SchedulerConfig, SchedulerConfigError, load_plugins
from .scheduler.queue import NeverFits, UnknownDependency, enqueue, run_pass
from .scheduler.selectors import AgentSelector
from .scheduler.sequencers import Sequencer
from .store import NameConflict, Store, Transaction
from .templates import SpecError, apply_template, parse_service_ports

T = TypeVar("T")

_CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
_READY_LINE = "bai-runtime: ready"
_ACTIVE = {Status.RUNNING, Status.RESTARTING}
#: Seconds beyond ``start_timeout`` another manager gets to finish a start or tear-down.
_HANDOVER = 10.0
#: Kept logs are cut to their last this-many characters.
_LOG_LIMIT = 1 << 20


def _move(session: Session, status: Status, now: float, info: str | None = None) -> None:
    """Move a session and, where the table allows, its kernels to ``status``."""
    for kernel in session.kernels:
        if kernel.status is not status and status in TRANSITIONS[kernel.status]:
            kernel.set_status(status, info)
    session.set_status(status, now, info)


def _nested(a: PurePosixPath, b: PurePosixPath) -> bool:
    """Whether one path is the other or inside it."""
    return a == b or a in b.parents or b in a.parents


class BaiSessionManager(LoggingConfigurable):
    """Sessions for one Jupyter server, a JupyterHub, or a command-line tool."""

    store_url = Unicode(
        None,
        allow_none=True,
        config=True,
        help="SQLAlchemy URL of the store; default: a SQLite file in the Jupyter data dir.",
    )
    backend = Enum(
        ["auto", "docker", "local"],
        "auto",
        config=True,
        help="Kernels run in Docker ('docker'), as local processes ('local'), or Docker "
        "when an engine answers, else local ('auto'). Ignored when `agents` is set.",
    )
    agents = List(
        Dict(),
        config=True,
        help="Agents, each {'id', 'backend': 'docker'|'local', 'endpoint' (Docker URL), "
        "'resource_group', 'capacity': {slot: amount}, 'reserve': {slot: amount}, "
        "'publish_ports': true|false (Docker: main1's ports on 127.0.0.1; default: only "
        "where its bridge address is not routable)}. Empty: one agent chosen by `backend`.",
    )
    resource_groups = Dict(
        {"default": {"sequencer": "fifo", "selector": "concentrated", "options": {}}},
        config=True,
        help="Resource groups: name → {'sequencer', 'selector', 'options'} "
        "(see docs/scheduler.md).",
    )
    default_image = Unicode(
        "bai-jupyter/python:3.11",
        config=True,
        help="Kernel image for requests that name none (build it: `bai-jupyter image build`).",
    )
    data_folders_root = Unicode(
        "",
        config=True,
        help="Where named data folders live (<root>/<owner>/<name>); "
        "default: <jupyter data dir>/bai_jupyter/folders.",
    )
    local_kernels_dir = Unicode(
        "",
        config=True,
        help="Where the local backend keeps its kernels' working dirs and logs; "
        "default: <jupyter runtime dir>/bai_jupyter/local-kernels.",
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
    kernel_disk_limit = Unicode(
        "",
        config=True,
        help="Size limit of each Docker kernel's writable layer (e.g. '10g'); '' = none. "
        "Needs a storage driver that supports it (overlay2 on xfs with pquota, "
        "devicemapper, btrfs, zfs); elsewhere a warning is logged once and kernels run "
        "without it.",
    )
    host_firewall = Bool(
        True,
        config=True,
        help="Block Docker kernels from this host's services except the kernel-access "
        "listener (an iptables chain BAI-JUPYTER-INPUT in INPUT; needs root and "
        "iptables, else a warning is logged). Local engines only.",
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
        _LOG_LIMIT, config=True, help="Characters of each kernel's log kept after it ends."
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.store: Store | None = None
        self._agents: dict[str, AgentBackend] = {}
        self._groups: dict[str, tuple[SchedulerConfig, Sequencer, AgentSelector]] = {}
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        #: The scheduling loop and the agents' watchers (cancelled on stop, not awaited).
        self._loops: set[asyncio.Task[Any]] = set()
        self._subscribers: set[asyncio.Queue[dict[str, Any]]] = set()
        #: Extra environment of every kernel, from (session id, agent id); not stored with
        #: the session. The server extension gives kernels its address and a session token.
        self.kernel_env_hook: Callable[[str, str], Mapping[str, str]] | None = None
        #: Host ports kernels may reach (see allow_host_ports).
        self._host_ports: builtins.list[int] = []
        #: The notebooks' host directory (the Jupyter server's root dir), trusted by the
        #: operator: mounted at NOTEBOOK_DIR in sessions whose meta names a notebook_dir.
        #: Set by the server extension (BaiJupyterApp.notebook_dir); ``None``: never.
        self.notebook_root: str | None = None
        self._started = False

    # --- lifecycle of the manager -----------------------------------------------------------

    async def start(self) -> None:
        """Open the store, register agents, reconcile, and start the scheduling loop."""
        if self._started:
            return
        groups: dict[str, dict[str, Any]] = dict(self.resource_groups)
        for name, conf in groups.items():
            try:
                config = SchedulerConfig.from_options(
                    conf.get("sequencer", "fifo"),
                    conf.get("selector", "concentrated"),
                    dict(conf.get("options") or {}),
                )
                self._groups[name] = (config, *load_plugins(config))
            except SchedulerConfigError as exc:
                raise InvalidRequest(f"resource group {name!r}: {exc}") from exc
        self.store = await asyncio.to_thread(Store, self.store_url)
        for agent in await self._make_agents():
            self._agents[agent.id] = agent
            capacity = await agent.capacity()
            record = Agent(
                agent.id, capacity, resource_group=agent.resource_group, backend=agent.backend
            )
            await self._db(partial(Transaction.put_agent, agent=record))
        await self._reconcile()
        await self.allow_host_ports([])  # kernels reach nothing on the host until told
        for agent in self._agents.values():
            self._loops.add(self._spawn(self._watch(agent)))
        self._loops.add(self._spawn(self._scheduler_loop()))
        self._loops.add(self._spawn(self._retention_loop()))
        self._started = True
        self.wake()

    async def stop(self) -> None:
        """Stop the loops and watchers; sessions keep running and are found again on start."""
        self._started = False
        for task in self._loops:
            task.cancel()
        # Starts and tear-downs under way finish first: nothing is left half-removed.
        work = builtins.list(self._tasks - self._loops)
        if work:
            _, stuck = await asyncio.wait(work, timeout=self.start_timeout)
            for task in stuck:
                self.log.warning("bai-jupyter: gave up waiting for %r", task)
                task.cancel()
        for agent in self._agents.values():
            await agent.close()
        if self._tasks:
            await asyncio.wait(builtins.list(self._tasks), timeout=10)
        self._agents.clear()
        if self.store is not None:
            self.store.close()

    async def agents_now(self) -> dict[str, ResourceSlot]:
        """The capacity of each agent this configuration gives, asked now (nothing started)."""
        agents = await self._make_agents()
        try:
            return {agent.id: await agent.capacity() for agent in agents}
        finally:
            for agent in agents:
                await agent.close()

    async def _make_agents(self) -> builtins.list[AgentBackend]:
        from .agents.docker import DockerAgent
        from .agents.local import LocalAgent

        def slots(value: Any) -> ResourceSlot | None:
            return None if value is None else ResourceSlot(value)

        made: builtins.list[AgentBackend] = []
        configured: builtins.list[dict[str, Any]] = builtins.list(self.agents)
        for conf in configured:
            kind = conf.get("backend", "docker")
            common = {
                "agent_id": conf.get("id") or f"{kind}-{len(made) + 1}",
                "resource_group": conf.get("resource_group", "default"),
                "capacity": slots(conf.get("capacity")),
            }
            if conf.get("reserve") is not None:
                common["reserve"] = ResourceSlot(conf["reserve"])
            if kind == "docker":
                publish = conf.get("publish_ports")
                made.append(
                    DockerAgent(
                        endpoint=conf.get("endpoint"),
                        publish_ports=publish,
                        disk_limit=self.kernel_disk_limit,
                        firewall=self.host_firewall,
                        **common,
                    )
                )
            elif kind == "local":
                made.append(LocalAgent(root=self._local_root(), **common))
            else:
                raise InvalidRequest(f"agents: unknown backend {kind!r} (use docker or local)")
        if made:
            return made
        if self.backend != "local" and await DockerAgent.engine_answers(None):
            self.log.info("bai-jupyter: kernels run in Docker (the local engine answered)")
            return [
                DockerAgent(
                    "docker", disk_limit=self.kernel_disk_limit, firewall=self.host_firewall
                )
            ]
        if self.backend == "docker":
            raise Unavailable("backend 'docker' is configured but no Docker engine answers")
        why = "backend=local" if self.backend == "local" else "no Docker engine answered"
        self.log.warning(
            "bai-jupyter: %s; kernels run as local processes "
            "(no isolation, no SSH, no resource limits)",
            why,
        )
        return [LocalAgent("local", root=self._local_root())]

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._loops.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error("bai-jupyter: background task failed", exc_info=task.exception())

    def wake(self) -> None:
        """Ask for a scheduling pass now."""
        self._wake.set()

    def group_scheduler(self, name: str) -> tuple[SchedulerConfig, Sequencer, AgentSelector]:
        """A started resource group's scheduler settings and plugins (for views of the queue)."""
        try:
            return self._groups[name]
        except KeyError:
            raise NotFound(f"no resource group {name!r}") from None

    # --- store access -----------------------------------------------------------------------

    def _store(self) -> Store:
        if self.store is None:
            raise Unavailable("the session manager is not started")
        return self.store

    async def _db(self, fn: Callable[[Transaction], T], write: bool = True) -> T:
        """Run ``fn(tx)`` in a write (or read-only) transaction, in a thread."""
        store = self._store()

        def run() -> T:
            with store.write() if write else store.read() as tx:
                return fn(tx)

        return await asyncio.to_thread(run)

    async def _edit(self, session_id: str, change: Callable[[Session], None]) -> Session:
        """Change a session in one transaction (validated by the lifecycle table), then tell."""
        store = self._store()

        def run() -> Session:
            with store.edit(session_id) as session:
                change(session)
            return session

        session = await asyncio.to_thread(run)
        self._publish(session)
        return session

    async def _transition(
        self, session_id: str, status: Status, info: str | None = None
    ) -> Session:
        return await self._edit(session_id, lambda s: _move(s, status, time.time(), info))

    # --- events -------------------------------------------------------------------------------

    def _publish(self, session: Session, **extra: Any) -> None:
        event = {
            "type": "session",
            "session_id": session.id,
            "name": session.name,
            "owner": session.owner,
            "status": session.status.value,
            "status_info": session.status_info,
            "kernels": {k.hostname: k.status.value for k in session.kernels},
            "at": time.time(),
            **extra,
        }
        for queue in list(self._subscribers):
            put_dropping_oldest(queue, event)

    @contextlib.contextmanager
    def _subscription(self) -> Iterator[asyncio.Queue[dict[str, Any]]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)

    async def allow_host_ports(self, ports: Iterable[int]) -> None:
        """Let kernels reach only these ports of this host (the kernel-access listeners)."""
        self._host_ports = sorted(set(self._host_ports) | set(ports))
        for agent in self._agents.values():
            try:
                await agent.allow_host_ports(builtins.list(self._host_ports))
            except AgentError as exc:
                self.log.warning("bai-jupyter: agent %s: host firewall: %s", agent.id, exc)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Session status changes as they happen (until the caller stops iterating)."""
        with self._subscription() as queue:
            while True:
                yield await queue.get()

    # --- the public API -----------------------------------------------------------------------

    async def create(
        self,
        request: Mapping[str, Any],
        owner: str,
        template: str | None = None,
        meta: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> Session:
        """Validate a request (over a template), enqueue it, and return the PENDING session.

        ``dry_run``: validate only; the session returned is not stored."""
        store = self._store()
        tmpl = None
        if template is not None:
            tmpl = await self._query(lambda tx: tx.get_template(template, owner))
            if tmpl is None:
                raise NotFound(f"no template named {template!r}")
        try:
            spec = apply_template(tmpl, request)
        except (SpecError, ResourceError) as exc:
            raise InvalidRequest(str(exc)) from exc
        if spec.image is None:
            spec.image = self.default_image
        if spec.resource_group not in self._groups:
            raise InvalidRequest(
                f"resource_group: no group {spec.resource_group!r} "
                f"(groups: {', '.join(sorted(self._groups))})"
            )
        try:
            # Every kernel holds real slots: the group's defaults fill what is left out.
            spec.resources = self._groups[spec.resource_group][0].kernel_resources(spec.resources)
        except ResourceError as exc:
            raise InvalidRequest(str(exc)) from exc
        await self._check_image(spec.image, spec.resource_group)
        try:
            await asyncio.to_thread(self._mounts, spec.mounts, owner, False)
        except ValueError as exc:
            raise InvalidRequest(f"mounts: {exc}") from exc
        resolved = [await self._resolve_id(dep, owner) for dep in spec.depends_on]
        spec.depends_on = builtins.list(dict.fromkeys(resolved))  # a name and its id: once
        session = Session.create(spec, owner, time.time())
        session.meta = dict(meta or {})
        try:
            await asyncio.to_thread(enqueue, store, session, dry_run)
        except (NeverFits, UnknownDependency) as exc:
            raise InvalidRequest(str(exc)) from exc
        except NameConflict as exc:
            raise Conflict(str(exc)) from exc
        if dry_run:
            return session
        self._publish(session)
        self.wake()
        return session

    async def _check_image(self, image: str, group: str) -> None:
        """Refuse at once an image no agent of the group has (no registry is asked at start)."""
        agents = [a for a in self._agents.values() if a.resource_group == group]
        failures = []
        for agent in agents:
            try:
                if await agent.has_image(image):
                    return
            except AgentError as exc:
                failures.append(str(exc))
        if failures:
            raise Unavailable("; ".join(failures))
        if agents:
            hint = (
                "build it: bai-jupyter image build"
                if image == self.default_image
                else ("pull or build it on the agents first")
            )
            raise InvalidRequest(
                f"image: {image} is on no agent of resource group {group!r}; {hint}"
            )

    async def _resolve_id(self, key: str, owner: str) -> str:
        session = await self._query(lambda tx: tx.get_session(key, owner))
        if session is None:
            raise InvalidRequest(f"depends_on: {owner} has no session {key!r}")
        return session.id

    async def _query(self, fn: Callable[[Transaction], T]) -> T:
        return await self._db(fn, write=False)

    async def get(self, key: str, owner: str | None = None) -> Session:
        """A session by id or by name (names need the owner); NotFound otherwise."""
        session = await self._query(lambda tx: tx.get_session(key, owner))
        if session is None:
            raise NotFound(f"no session {key!r}" + (f" of {owner}" if owner else ""))
        return session

    async def list(
        self, owner: str | None = None, statuses: Iterable[Status] | None = None
    ) -> builtins.list[Session]:
        """Sessions, oldest first, of one owner (or everyone's) in the given statuses."""
        wanted = None if statuses is None else builtins.list(statuses)
        return await self._query(lambda tx: tx.list_sessions(owner=owner, statuses=wanted))

    async def purge(self, key: str, owner: str | None = None) -> Session:
        """Delete an ended session's record (its logs too); Conflict while it has not ended."""
        session = await self.get(key, owner)
        if not session.status.is_terminal:
            raise Conflict(
                f"session {session.id} is {session.status.value}: only an ended session's "
                "record can be deleted; end it first (DELETE without purge)"
            )
        await self._db(lambda tx: tx.delete_sessions([session.id]))
        return session

    async def purge_ended(self, older_than: float) -> int:
        """Delete the records of sessions that ended more than ``older_than`` seconds ago."""
        cutoff = time.time() - older_than
        ended = await self.list(statuses=[s for s in Status if s.is_terminal])
        old = [s.id for s in ended if (s.status_history[-1].at if s.status_history else 0) < cutoff]
        return await self._db(lambda tx: tx.delete_sessions(old)) if old else 0

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

    async def destroy(
        self, key: str, owner: str | None = None, reason: str = "user-requested"
    ) -> Session:
        """Cancel a pending session, or terminate a starting or running one."""
        session = await self.get(key, owner)
        if session.status is Status.PENDING:
            try:
                session = await self._transition(session.id, Status.CANCELLED, reason)
            except IllegalTransition:
                session = await self.get(session.id)  # scheduled meanwhile: terminate below
            else:
                self.wake()
                return session
        if session.status.is_terminal or session.status is Status.TERMINATING:
            return session
        session = await self._transition(session.id, Status.TERMINATING, reason)
        return await self._teardown(session, Status.TERMINATED, reason)

    async def _teardown(self, session: Session, final: Status, info: str | None) -> Session:
        """Keep the logs, remove the kernels everywhere, then record ``final``."""
        await self._keep_logs(session)
        for agent_id in {k.agent_id for k in session.kernels if k.agent_id}:
            agent = self._agents.get(agent_id)
            if agent is not None:
                try:
                    await agent.destroy_session(session.id)
                except AgentError as exc:
                    self.log.warning("bai-jupyter: removing %s: %s", session.id, exc)
        if session.status is not final:
            session = await self._transition(session.id, final, info)
        self.wake()
        return session

    async def _keep_logs(self, session: Session) -> None:
        for kernel in session.kernels:
            agent = self._agents.get(kernel.agent_id or "")
            if agent is None or kernel.container_id is None:
                continue
            try:
                text = await agent.logs(kernel.id)
            except AgentError:
                continue
            kept = text[-self.log_limit :]
            await self._db(partial(Transaction.save_logs, kernel_id=kernel.id, logs=kept))

    async def wait_for(
        self,
        key: str,
        statuses: Iterable[Status],
        timeout: float | None = None,
        owner: str | None = None,
    ) -> Session:
        """Wait until the session is in one of ``statuses`` or has ended; Timeout otherwise."""
        wanted = set(statuses)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._subscription() as queue:
            while True:
                session = await self.get(key, owner)
                if session.status in wanted or session.status.is_terminal:
                    return session
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise Timeout(
                        f"session {session.id} is still {session.status.value} after {timeout:g} s"
                    )
                # Wake on any event (cheap to re-read), and at least every second.
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(queue.get(), min(left or 1.0, 1.0))

    async def logs(self, key: str, kernel: str = "main1", owner: str | None = None) -> str:
        """A kernel's output: live while it runs, kept in the store after it ends."""
        session = await self.get(key, owner)
        target = self._kernel(session, kernel)
        kept = await self._query(lambda tx: tx.get_logs(target.id))
        if kept is not None:
            return kept
        agent = self._agents.get(target.agent_id or "")
        if agent is None or target.container_id is None:
            return ""
        try:
            return await agent.logs(target.id)
        except AgentError as exc:
            raise Unavailable(str(exc)) from exc

    async def exec(
        self,
        key: str,
        command: builtins.list[str],
        kernel: str = "main1",
        owner: str | None = None,
        timeout: float = 60,
    ) -> ExecResult:
        """Run a command in one kernel of a running session."""
        agent, kernel_id = await self._running_kernel(key, kernel, owner)
        try:
            return await agent.exec(kernel_id, command, timeout)
        except AgentError as exc:
            raise Unavailable(str(exc)) from exc

    async def signal(
        self, key: str, signum: int, kernel: str = "main1", owner: str | None = None
    ) -> None:
        """Send a signal to a kernel's runtime (INT interrupts, HUP restarts the ipykernel)."""
        agent, kernel_id = await self._running_kernel(key, kernel, owner)
        try:
            await agent.signal(kernel_id, signum)
        except AgentError as exc:
            raise Unavailable(str(exc)) from exc

    async def add_service_port(
        self, key: str, service_port: str, owner: str | None = None
    ) -> Session:
        """Declare a service port of a RUNNING session's main1 after start, for the proxy.

        Works where the agent reaches main1 at its own address (any port); a published
        container cannot gain a port (Docker cannot publish on a running container)."""
        try:
            (spec,) = parse_service_ports([service_port], "service_port")
        except SpecError as exc:
            raise InvalidRequest(str(exc)) from exc
        name, _, port = spec.split(":")
        session = await self.get(key, owner)
        if session.status is not Status.RUNNING:
            raise Unavailable(f"session {session.id} is {session.status.value}, not RUNNING")
        if name in {s.split(":", 1)[0] for s in session.spec.service_ports}:
            raise Conflict(f"session {session.id} already has a service {name!r}")
        main = next(k for k in session.kernels if k.role is KernelRole.MAIN)
        agent = self._agents.get(main.agent_id or "")
        if agent is None:
            raise Unavailable(f"the agent of main1 ({main.agent_id}) is not connected")
        reached = agent.late_port(int(port))
        if reached is None:
            raise Conflict(
                f"session {session.id}: agent {agent.id} publishes main1's ports and cannot "
                "add one to a running container; declare the port when creating the session "
                "(service_ports, or --service-port on the kernelspec)"
            )
        try:
            parse_service_ports([*session.spec.service_ports, spec])
        except SpecError as exc:
            raise InvalidRequest(str(exc)) from exc

        def adding(s: Session) -> None:
            if s.status is not Status.RUNNING:
                raise Unavailable(f"session {s.id} is {s.status.value}, not RUNNING")
            if name in {p.split(":", 1)[0] for p in s.spec.service_ports}:
                raise Conflict(f"session {s.id} already has a service {name!r}")
            s.spec.service_ports = [*s.spec.service_ports, spec]
            for kernel in s.kernels:
                if kernel.role is KernelRole.MAIN:
                    ports = {**kernel.info.get("ports", {}), f"service:{name}": reached}
                    kernel.info = {**kernel.info, "ports": ports}

        return await self._edit(session.id, adding)

    async def _running_kernel(
        self, key: str, hostname: str, owner: str | None
    ) -> tuple[AgentBackend, str]:
        """The agent and kernel id of one kernel of a RUNNING session; Unavailable otherwise."""
        session = await self.get(key, owner)
        if session.status not in _ACTIVE:
            raise Unavailable(f"session {session.id} is {session.status.value}, not RUNNING")
        target = self._kernel(session, hostname)
        agent = self._agents.get(target.agent_id or "")
        if agent is None:
            raise Unavailable(f"the agent of {hostname} ({target.agent_id}) is not connected")
        return agent, target.id

    @staticmethod
    def _kernel(session: Session, hostname: str) -> Kernel:
        for kernel in session.kernels:
            if hostname in (kernel.hostname, kernel.id):
                return kernel
        hosts = ", ".join(k.hostname for k in session.kernels)
        raise NotFound(f"session {session.id} has no kernel {hostname!r} (kernels: {hosts})")

    def _local_root(self) -> Path | None:
        return Path(self.local_kernels_dir) if self.local_kernels_dir else None

    def mount_policy(self, trusted: Iterable[str] = ()) -> MountPolicy:
        """The allow-list (plus ``trusted`` prefixes) and what is never mountable."""
        from jupyter_core.paths import jupyter_config_path, jupyter_path, jupyter_runtime_dir

        from .agents.docker import _DEFAULT_RUNTIME_DIR, kernel_packages

        # Whatever the server runs or reads as code or config (its Python environment,
        # Jupyter's config and data paths): a kernel writing there runs code on the host.
        forbidden: builtins.list[str | Path] = [
            jupyter_runtime_dir(),
            *jupyter_path(),
            *jupyter_config_path(),
            sys.prefix,
            *kernel_packages(),
            _DEFAULT_RUNTIME_DIR,
        ]
        if self.local_kernels_dir:
            forbidden.append(self.local_kernels_dir)
        store = self.store
        database = store.engine.url.database if store is not None else None
        sqlite = store is not None and store.engine.dialect.name == "sqlite"
        if sqlite and database and database != ":memory:":
            forbidden.append(Path(database).resolve().parent)
        for agent in self._agents.values():
            forbidden.extend(agent.private_paths())
        allowed = [*trusted, *self.allowed_host_paths]
        return MountPolicy.build(allowed, forbidden, self._folders_root())

    def _mounts(self, entries: Iterable[str], owner: str, create: bool) -> builtins.list[Mount]:
        """Parse and check ``mounts`` (blocking: resolves paths); create the owner's folders.

        Only a named folder of the owner's is ever created; a host path must exist."""
        entries = builtins.list(entries)
        if not entries:
            return []
        policy = self.mount_policy()
        checked = []
        for entry in entries:
            mount = policy.check(parse_mount(entry, owner, self._folders_root()), owner)
            if mount.folder:
                if create:
                    Path(mount.source).mkdir(parents=True, exist_ok=True)
                    # Created now: check again what it resolves to (nothing swapped in).
                    mount = policy.check(mount, owner)
            elif not Path(mount.source).exists():
                raise MountRefused(f"{mount.source}: no such host path (none is created)")
            checked.append(mount)
        return checked

    def _notebook_mount(
        self, session: Session, agent: AgentBackend, taken: Iterable[str]
    ) -> tuple[Mount | None, str | None]:
        """The notebook root's mount and the kernels' working dir (the notebook's folder).

        Blocking (resolves paths). ``(None, None)`` when the session names no notebook
        dir, none is configured, the agent cannot see this host's files, or the policy
        refuses the root (e.g. ``/``, or a dir holding the store): said in the log, and
        the kernels start in WORK_DIR without it."""
        wanted = session.meta.get("notebook_dir")
        root = self.notebook_root
        if not isinstance(wanted, str) or not wanted or not root:
            return None, None
        skip = "bai-jupyter: session %s: notebook dir %s not mounted (kernels start in %s): %s"
        if not agent.shares_host_files:
            why = f"agent {agent.id} does not share this host's file system"
            self.log.info(skip, session.id, root, WORK_DIR, why)
            return None, None
        target = PurePosixPath(NOTEBOOK_DIR)
        clash = next((t for t in map(PurePosixPath, taken) if _nested(t, target)), None)
        if clash is not None:  # one inside the other: the engine would make dirs in a source
            self.log.warning(skip, session.id, root, WORK_DIR, f"a mount uses {clash}")
            return None, None
        try:
            if not Path(root).is_dir():
                raise MountRefused(f"{root}: not a directory")
            policy = self.mount_policy(trusted=[root])
            mount = policy.check(Mount(root, NOTEBOOK_DIR), session.owner)
        except (ValueError, OSError) as exc:
            self.log.warning(skip, session.id, root, WORK_DIR, exc)
            return None, None
        relative = Path(os.path.relpath(os.path.realpath(wanted), mount.source))
        if relative.parts and relative.parts[0] == "..":
            return mount, NOTEBOOK_DIR  # a notebook outside the root: start at the root
        return mount, str(PurePosixPath(NOTEBOOK_DIR, *relative.parts))

    def _folders_root(self) -> Path:
        if self.data_folders_root:
            return Path(self.data_folders_root)
        from jupyter_core.paths import jupyter_data_dir

        return Path(jupyter_data_dir()) / "bai_jupyter" / "folders"

    # --- scheduling and starting --------------------------------------------------------------

    async def host_addresses(self) -> dict[str, str]:
        """Agent id → the address its kernels reach this host at, for agents that have one."""
        found: dict[str, str] = {}
        for agent in self._agents.values():
            try:
                address = await agent.host_address()
            except AgentError as exc:
                self.log.warning("bai-jupyter: agent %s: %s", agent.id, exc)
                continue
            if address:
                found[agent.id] = address
        return found

    async def _scheduler_loop(self) -> None:
        while True:
            waiter = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({waiter}, timeout=self.pass_interval)
            finally:
                waiter.cancel()
            self._wake.clear()
            try:
                await self.schedule_now()
            except Exception:  # the loop must survive anything a pass hits
                self.log.exception("bai-jupyter: scheduling pass failed")

    async def schedule_now(self) -> None:
        """One pass over every resource group; start what was placed."""
        store = self._store()
        for name, (config, sequencer, selector) in self._groups.items():
            result = await asyncio.to_thread(
                run_pass, store, name, config, sequencer, selector, time.time()
            )
            changed = [p.session_id for p in result.placements] + [
                c.session_id for c in result.cancellations
            ]
            if len(result.failures) <= 100:
                changed += list(result.failures)
            for session_id in changed:
                self._publish(await self.get(session_id))
            for placement in result.placements:
                self._spawn(self._start(placement.session_id))
            if result.cancellations:
                self.wake()  # dependants of what was cancelled

    async def _start(self, session_id: str) -> None:
        """Drive a SCHEDULED session to RUNNING; on failure cancel it and clean up.

        Moving it to PREPARING is the claim: when another manager on this store got
        there first, or it was destroyed meanwhile, this one leaves it alone."""
        try:
            session = await self._transition(session_id, Status.PREPARING)
        except IllegalTransition:
            return
        try:
            agent_ids = {k.agent_id for k in session.kernels}
            if len(agent_ids) != 1:
                raise AgentError(
                    "multi-node sessions spread over several agents are not supported yet"
                )
            agent = self._agents.get(next(iter(agent_ids)) or "")
            if agent is None:
                raise AgentError(f"agent {next(iter(agent_ids))} is not connected")
            plans = await asyncio.to_thread(self._plans, session, agent)

            def prepared(s: Session) -> None:  # images are local: nothing to pull
                _move(s, Status.PREPARED, time.time())
                _move(s, Status.CREATING, time.time())

            await self._edit(session_id, prepared)
            started = await asyncio.wait_for(
                self._start_ready(agent, session_id, plans), self.start_timeout
            )
            by_id = {s.kernel_id: s for s in started}
            plan_by_id = {p.kernel_id: p for p in plans}

            def running(s: Session) -> None:
                for kernel in s.kernels:
                    done = by_id[kernel.id]
                    kernel.container_id = done.container_id
                    kernel.info = {"host": done.host, "ports": dict(done.ports)}
                    conn = plan_by_id[kernel.id].bootstrap.get("connection")
                    if conn and "shell" in done.ports:
                        kernel.info["connection"] = {
                            **conn,
                            "ip": done.host,
                            **{f"{ch}_port": done.ports[ch] for ch in _CHANNELS},
                        }
                _move(s, Status.RUNNING, time.time())

            await self._edit(session_id, running)
        except IllegalTransition:
            # Destroyed while starting: make sure nothing it created stays.
            current = await self.get(session_id)
            await self._teardown(current, current.status, current.status_info)
        except Exception as exc:
            message = str(exc) or type(exc).__name__
            if isinstance(exc, asyncio.TimeoutError):
                message = f"the agent did not start the kernels within {self.start_timeout:g} s"
            self.log.warning("bai-jupyter: session %s failed to start: %s", session_id, message)
            current = await self.get(session_id)
            if current.status in STARTING:

                def failed(s: Session) -> None:
                    _move(s, Status.CANCELLED, time.time(), "failed-to-start")
                    s.status_data = {**s.status_data, "error": message}

                current = await self._edit(session_id, failed)
            await self._teardown(current, current.status, current.status_info)

    async def _start_ready(
        self, agent: AgentBackend, session_id: str, plans: builtins.list[KernelPlan]
    ) -> builtins.list[KernelStarted]:
        """Start the kernels and wait until each runtime says it is set up (SSH, files)."""
        started = await agent.start_kernels(session_id, plans)
        ready = await asyncio.gather(
            *(agent.wait_for_output(s.kernel_id, _READY_LINE, self.start_timeout) for s in started)
        )
        for done, was_ready in zip(started, ready):
            if not was_ready:
                tail = (await agent.logs(done.kernel_id))[-2000:]
                raise AgentError(f"a kernel did not get ready:\n{tail}")
        return started

    def _plans(self, session: Session, agent: AgentBackend) -> builtins.list[KernelPlan]:
        # A session of one kernel has nobody to ssh to: no keys, no sshd competing with
        # the ipykernel's start for CPU.
        cluster = agent.backend == "docker" and len(session.kernels) > 1
        keys = generate_ssh_keys() if cluster else None
        connection = None
        if session.spec.type is SessionType.INTERACTIVE:
            connection = {
                "key": secrets.token_hex(32),
                "transport": "tcp",
                "signature_scheme": "hmac-sha256",
                "kernel_name": "python3",
            }
        try:
            mounts = self._mounts(session.spec.mounts, session.owner, True)
        except ValueError as exc:  # the policy or a template changed since it was created
            raise AgentError(f"mounts: {exc}") from exc
        notebooks, work_dir = self._notebook_mount(session, agent, [m.target for m in mounts])
        if notebooks is not None:
            mounts = [*mounts, notebooks]
        hook = self.kernel_env_hook
        extra_env = dict(hook(session.id, agent.id)) if hook is not None else {}
        return [
            KernelPlan(
                session_id=session.id,
                kernel_id=kernel.id,
                hostname=kernel.hostname,
                role=kernel.role,
                image=session.spec.image or self.default_image,
                slots=kernel.slots.to_json(),
                env={**extra_env, **kernel_environ(session, kernel)},
                mounts=mounts,
                work_dir=work_dir,
                labels=labels(session, kernel, self._store().id),
                bootstrap=bootstrap(
                    session, kernel, keys, connection if kernel.role is KernelRole.MAIN else None
                ),
            )
            for kernel in session.kernels
        ]

    # --- what kernels report ------------------------------------------------------------------

    async def _watch(self, agent: AgentBackend) -> None:
        while True:
            try:
                async for event in agent.events():
                    self._spawn(self._on_kernel_event(event))
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("bai-jupyter: watching agent %s failed; retrying", agent.id)
                await asyncio.sleep(1)

    async def _on_kernel_event(self, event: KernelEvent) -> None:
        try:
            session = await self.get(event.session_id)
        except NotFound:
            return
        if session.status in STARTING:
            # A batch command can end before its session is marked RUNNING.
            session = await self.wait_for(session.id, _ACTIVE, timeout=self.start_timeout + 5)
        if session.status not in _ACTIVE:
            return  # we are removing it ourselves, or it already ended
        kernel = next((k for k in session.kernels if k.id == event.kernel_id), None)
        if kernel is None:
            return
        try:
            if event.kind is KernelEventKind.OOM_KILLED:
                # A process was killed for memory; the kernel's own death comes as EXITED.
                await self._oom_notice(session, kernel.hostname)
            elif (
                event.kind is KernelEventKind.EXITED
                and kernel.role is KernelRole.MAIN
                and session.spec.type is SessionType.BATCH
            ):
                await self._finish_batch(session, event)
            elif (
                event.kind is KernelEventKind.EXITED
                and kernel.role is KernelRole.MAIN
                and event.exit_code == 0
                and not event.detail.get("oom_killed")
            ):
                # main1's ipykernel was asked to shut down (jupyter console's exit, a
                # client's shutdown_request) and its runtime ended cleanly: not a death.
                await self.destroy(session.id, reason="user-requested")
            elif event.kind is KernelEventKind.NETWORK_LOST:
                await self._fail(session, "network-disconnected", kernel.hostname, None)
            else:
                info = "oom-killed" if event.detail.get("oom_killed") else "kernel-died"
                await self._fail(session, info, kernel.hostname, event.exit_code)
        except IllegalTransition:
            pass  # another event or a destroy got there first

    async def _oom_notice(self, session: Session, host: str) -> None:
        """Count a process killed for memory in ``status_data["oom"]`` and tell the watchers."""
        now = time.time()

        def noting(s: Session) -> None:
            if s.status not in _ACTIVE:
                return
            count = int((s.status_data.get("oom") or {}).get("count", 0)) + 1
            oom = {"count": count, "last_at": now, "kernel": host}
            s.status_data = {**s.status_data, "oom": oom}

        def run() -> Session:
            with self._store().edit(session.id) as s:
                noting(s)
            return s

        updated = await asyncio.to_thread(run)
        notice = {
            "kind": "oom",
            "kernel": host,
            "at": now,
            "message": f"a process in {host} was killed: out of memory (the session goes on)",
        }
        self._publish(updated, notice=notice)

    async def _finish_batch(self, session: Session, event: KernelEvent) -> None:
        code = event.exit_code if event.exit_code is not None else -1
        if event.detail.get("task_timeout"):
            info = "task-timeout"
        elif event.detail.get("oom_killed"):
            info = "oom-killed"
        else:
            info = "task-finished" if code == 0 else "task-failed"

        def ending(s: Session) -> None:
            s.finish(code)
            _move(s, Status.TERMINATING, time.time(), info)

        session = await self._edit(session.id, ending)
        await self._teardown(session, Status.TERMINATED, info)

    async def _fail(self, session: Session, info: str, host: str, exit_code: int | None) -> None:
        def failing(s: Session) -> None:
            _move(s, Status.ERROR, time.time(), info)
            s.status_data = {**s.status_data, "kernel": host, "exit_code": exit_code}

        session = await self._edit(session.id, failing)
        await self._teardown(session, Status.ERROR, info)

    # --- after a restart ----------------------------------------------------------------------

    async def _reconcile(self) -> None:
        """Match the store against what the agents really have."""
        live: dict[str, dict[str, Any]] = {}
        scope = self._store().id
        for agent in self._agents.values():
            try:
                for kernel in await agent.live_kernels():
                    if kernel.labels.get(LABEL_SCOPE) != scope:
                        continue  # another manager's (another store's): not ours to judge
                    live[kernel.kernel_id] = {"kernel": kernel, "agent": agent}
            except AgentError as exc:
                self.log.warning("bai-jupyter: agent %s unreachable: %s", agent.id, exc)
        known: set[str] = set()
        for session in await self.list(statuses=[s for s in Status if not s.is_terminal]):
            if session.status is Status.PENDING:
                continue
            known.add(session.id)
            await self._reconcile_session(session, live)
        strays = {
            (entry["kernel"].session_id, entry["agent"])
            for entry in live.values()
            if entry["kernel"].session_id not in known
        }
        for session_id, agent in strays:
            self.log.info("bai-jupyter: removing stray kernels of session %s", session_id)
            await agent.destroy_session(session_id)

    async def _reconcile_session(
        self, session: Session, live: dict[str, dict[str, Any]], recheck: bool = True
    ) -> None:
        if session.status is Status.SCHEDULED:
            self._spawn(self._start(session.id))
            return
        if recheck and (session.status in STARTING or session.status is Status.TERMINATING):
            # Another manager on this store (a server's and a kernel provisioner's embedded
            # one) may be starting or removing it right now: judge it only once that manager
            # has had its time, and only if it made no progress meanwhile.
            left = session.status_history[-1].at + self.start_timeout + _HANDOVER - time.time()
            if left > 0:
                self._loops.add(self._spawn(self._recheck(session, left)))
                return
        if session.status in STARTING:
            # Interrupted half-way: its containers may be incomplete.
            await self._fail(session, "start-interrupted", "main1", None)
            return
        if session.status is Status.TERMINATING:
            await self._teardown(session, Status.TERMINATED, session.status_info)
            return
        found = [live.get(k.id) for k in session.kernels]
        main = next(k for k in session.kernels if k.role is KernelRole.MAIN)
        main_live = live.get(main.id)
        if all(entry is not None and entry["kernel"].running for entry in found):
            return  # still running: nothing to do
        if (
            session.spec.type is SessionType.BATCH
            and main_live is not None
            and not main_live["kernel"].running
            and main_live["kernel"].exit_code is not None
        ):
            code = main_live["kernel"].exit_code
            await self._finish_batch(
                session,
                KernelEvent(KernelEventKind.EXITED, session.id, main.id, exit_code=code),
            )
            return
        gone = [k.hostname for k, e in zip(session.kernels, found) if e is None]
        await self._fail(session, "kernel-lost", ",".join(gone) or "main1", None)

    async def _recheck(self, seen: Session, delay: float) -> None:
        """Reconcile a starting or ending session after ``delay`` unless it moved on."""
        await asyncio.sleep(delay)
        session = await self.get(seen.id)
        if len(session.status_history) == len(seen.status_history):
            with contextlib.suppress(IllegalTransition):  # it moved on after all
                await self._reconcile_session(session, {}, recheck=False)
