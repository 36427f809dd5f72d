"""The lifecycle driver: a placed session to RUNNING, and any session to its end.

Every step is written to the store before the agents act on it, so a manager
that restarts half-way finds the session where it was (see ``reconcile``). A
session may be spread over several agents (``multinode``); each agent that
lacks its image gets it first, in PULLING (``images``).
"""

from __future__ import annotations

import asyncio
import copy
import secrets
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Protocol

from ...agents.base import (
    AgentBackend,
    AgentError,
    KernelEvent,
    KernelStarted,
    kernel_connection,
)
from ...kernel_plan import KernelPlan, bootstrap, generate_ssh_keys, kernel_environ, labels
from ...model import STARTING, IllegalTransition, KernelRole, Session, SessionType, Status
from ...mounts import Mount
from ...runtime.protocol import READY_LINE
from ...store import Transaction
from ..core import Core, Settings, move
from ..requests.mount_check import ADMIN_MOUNTS, MountCheck
from ..watchdogs.idle_rules import IdleFollow
from .images import ImagePresence
from .multinode import MultiNode
from .sftp import record as sftp_record
from .sftp import sftp_setup

__all__ = ["Lifecycle"]


class LifecycleSettings(Settings, Protocol):
    @property
    def kernel_env_hook(self) -> Callable[[str, str], Mapping[str, str]] | None: ...


class Lifecycle:
    """Starts placed sessions and ends sessions (destroyed, failed, or a finished batch)."""

    def __init__(
        self, core: Core, settings: LifecycleSettings, mounts: MountCheck, follow: IdleFollow
    ) -> None:
        self.core = core
        self.settings = settings
        self.mounts = mounts
        #: Told the session as it will be RUNNING (its kernels' connection info), before
        #: anyone is: the idle rules follow main1 from then on.
        self.follow = follow
        self.multinode = MultiNode(core, settings, mounts)
        self.images = ImagePresence(core, settings)
        #: The sessions this process is starting now.
        self.starting: set[str] = set()

    # --- ending -------------------------------------------------------------------------------

    async def destroy(
        self, key: str, owner: str | None = None, reason: str = "user-requested", by: str = ""
    ) -> Session:
        """Cancel a pending session, or terminate a starting or running one; ``by``: the
        caller who ended it (recorded as ``ended_by``; none: the manager's own rules)."""
        core = self.core
        session = await core.get(key, owner)
        if session.status is Status.PENDING:
            try:
                session = await core.transition(session.id, Status.CANCELLED, reason)
            except IllegalTransition:
                session = await core.get(session.id)  # scheduled meanwhile: terminate below
            else:
                core.wake()
                return session
        ours = False

        def terminating(s: Session) -> None:
            nonlocal ours
            # Another destroy (a kernel shut down while its session is ended) may have got
            # there first: then that one removes it.
            if not (s.status.is_terminal or s.status is Status.TERMINATING):
                move(s, Status.TERMINATING, time.time(), reason)
                if by:
                    s.status_data = {**s.status_data, "ended_by": by}
                ours = True

        session = await core.edit(session.id, terminating)
        return await self.teardown(session, Status.TERMINATED, reason) if ours else session

    async def teardown(self, session: Session, final: Status, info: str | None) -> Session:
        """Keep the logs, remove the kernels everywhere, then record ``final``.

        A lost agent is not asked, and one that fails is asked again: its kernels go when
        it answers again (``liveness``)."""
        await self._keep_logs(session)
        failed = await self._remove(session)
        if session.status is not final:

            def ending(s: Session) -> None:
                # Forced to ERROR meanwhile (a hang-timeout while it was being removed):
                # that is how it ended.
                if not s.status.is_terminal:
                    move(s, final, time.time(), info)

            session = await self.core.edit(session.id, ending)
        self.core.unswept |= failed  # once the session is ended: a sweep removes its kernels
        self.core.wake()
        return session

    async def _remove(self, session: Session) -> set[str]:
        """Remove the session's kernels on every agent but lost ones, and its network; the
        agents that failed to."""
        agent_ids = {k.agent_id for k in session.kernels if k.agent_id}
        failed: set[str] = set()
        for agent_id in agent_ids - self.core.lost:
            agent = self.core.agents.get(agent_id)
            if agent is not None:
                try:
                    await agent.destroy_session(session.id)
                except AgentError as exc:
                    failed.add(agent_id)
                    self.core.log.warning("bai-jupyter: removing %s: %s", session.id, exc)
        if len(agent_ids) > 1:
            await self.multinode.release(session)
        return failed

    async def _keep_logs(self, session: Session) -> None:
        for kernel in session.kernels:
            agent = self.core.agents.get(kernel.agent_id or "")
            if agent is None or kernel.container_id is None or agent.id in self.core.lost:
                continue
            try:  # read as a stream within the limit: a huge log never sits in memory
                kept = await agent.logs(kernel.id, self.settings.log_tail, self.settings.log_limit)
            except AgentError:
                continue
            await self.core.db(partial(Transaction.save_logs, kernel_id=kernel.id, logs=kept))

    async def fail(self, session: Session, info: str, host: str, exit_code: int | None) -> None:
        """End a running session with ERROR ``info`` (which kernel, its exit code)."""

        def failing(s: Session) -> None:
            move(s, Status.ERROR, time.time(), info)
            s.status_data = {**s.status_data, "kernel": host, "exit_code": exit_code}

        session = await self.core.edit(session.id, failing)
        await self.teardown(session, Status.ERROR, info)

    async def finish_batch(self, session: Session, event: KernelEvent) -> None:
        """A batch main1 exited: record its result and exit code, then clean up."""
        code = event.exit_code if event.exit_code is not None else -1
        if event.detail.get("task_timeout"):
            info = "task-timeout"
        elif event.detail.get("oom_killed"):
            info = "oom-killed"
        else:
            info = "task-finished" if code == 0 else "task-failed"

        def ending(s: Session) -> None:
            s.finish(code)
            move(s, Status.TERMINATING, time.time(), info)

        session = await self.core.edit(session.id, ending)
        await self.teardown(session, Status.TERMINATED, info)

    # --- starting -----------------------------------------------------------------------------

    async def take_over(self, session: Session) -> None:
        """Start again what the store's previous leader left half-started (it died or
        stopped mid-start): what it made is removed and the session goes back to
        SCHEDULED (``handover``), on the agents it was placed on, and starts."""
        if session.id in self.starting:
            return  # this process's own start, from before it last led: still going
        self.core.log.warning(
            "bai-jupyter: session %s was left %s by the previous leader: starting it again",
            session.id,
            session.status.value,
        )
        await self._remove(session)
        try:
            await self.core.edit(
                session.id, lambda s: move(s, Status.SCHEDULED, time.time(), "handover")
            )
        except IllegalTransition:
            return  # ended meanwhile
        await self.start(session.id)

    async def start(self, session_id: str) -> None:
        """Drive a SCHEDULED session to RUNNING; on failure cancel it and clean up.

        Moving it to PREPARING is the claim: when another manager on this store got
        there first, or it was destroyed meanwhile, this one leaves it alone."""
        core = self.core
        try:
            session = await core.transition(session_id, Status.PREPARING)
        except IllegalTransition:
            return
        self.starting.add(session_id)
        try:
            await self._start(session)
        finally:
            self.starting.discard(session_id)

    async def _start(self, session: Session) -> None:
        core, session_id = self.core, session.id
        try:
            agents = self._agents(session)
            network = None
            if len(agents) > 1:  # spread: the agents' Swarm gives the session one network
                network = await self.multinode.prepare(session, agents.values())
            # The images' presence is asked while the plans are made (keys, mount paths).
            _, plans = await asyncio.gather(
                self._ensure_images(session, agents),
                asyncio.to_thread(self._plans, session, agents, network),
            )

            def prepared(s: Session) -> None:
                move(s, Status.PREPARED, time.time())
                move(s, Status.CREATING, time.time())

            creating = await core.edit(session_id, prepared)
            timeout = self.settings.start_timeout
            started = await asyncio.wait_for(self._start_all(session, agents, plans), timeout)
            ready = copy.deepcopy(creating)
            _running(ready, started=started, plans=plans)
            await self.follow.before_running(ready)
            await core.edit(session_id, partial(_running, started=started, plans=plans))
        except IllegalTransition:
            # Destroyed while starting: make sure nothing it created stays.
            current = await core.get(session_id)
            await self.teardown(current, current.status, current.status_info)
        except Exception as exc:
            message = str(exc) or type(exc).__name__
            if isinstance(exc, asyncio.TimeoutError):
                message = (
                    f"the agent did not start the kernels within {self.settings.start_timeout:g} s"
                )
            core.log.warning("bai-jupyter: session %s failed to start: %s", session_id, message)
            current = await core.get(session_id)
            if current.status in STARTING:

                def failed(s: Session) -> None:
                    move(s, Status.CANCELLED, time.time(), "failed-to-start")
                    s.status_data = {**s.status_data, "error": message}

                current = await core.edit(session_id, failed)
            await self.teardown(current, current.status, current.status_info)

    async def _ensure_images(self, session: Session, agents: dict[str, AgentBackend]) -> None:
        """Each agent gets the images of the kernels placed on it (in PULLING)."""
        roles = {role.name: role for role in session.spec.cluster_roles()}
        needs: dict[str, dict[str, AgentBackend]] = {}
        for kernel in session.kernels:
            image = roles[kernel.role_name].image or self.settings.default_image
            agent_id = kernel.agent_id or ""
            needs.setdefault(image, {})[agent_id] = agents[agent_id]
        for image, where in needs.items():
            await self.images.ensure(session, image, where)

    def _agents(self, session: Session) -> dict[str, AgentBackend]:
        """The connected agents the session's kernels were placed on, by id."""
        found: dict[str, AgentBackend] = {}
        for agent_id in dict.fromkeys(k.agent_id or "" for k in session.kernels):
            agent = self.core.agents.get(agent_id)
            if agent is None:
                raise AgentError(f"agent {agent_id} is not connected")
            if agent_id in self.core.lost:
                raise AgentError(f"agent {agent_id} is lost (it stopped answering)")
            found[agent_id] = agent
        return found

    async def _start_all(
        self, session: Session, agents: dict[str, AgentBackend], plans: list[KernelPlan]
    ) -> list[KernelStarted]:
        """Each agent's kernels, every agent at once; the first failure once all ended."""
        where = {k.id: k.agent_id for k in session.kernels}
        results = await asyncio.gather(
            *(
                self._start_ready(agent, session.id, [p for p in plans if where[p.kernel_id] == i])
                for i, agent in agents.items()
            ),
            return_exceptions=True,
        )
        started: list[KernelStarted] = []
        for result in results:
            if isinstance(result, BaseException):
                raise result
            started += result
        return started

    async def _start_ready(
        self, agent: AgentBackend, session_id: str, plans: list[KernelPlan]
    ) -> list[KernelStarted]:
        """Start the kernels and wait until each runtime says it is set up (SSH, files)."""
        started = await agent.start_kernels(session_id, plans)
        timeout = self.settings.start_timeout
        ready = await asyncio.gather(
            *(agent.wait_for_output(s.kernel_id, READY_LINE, timeout) for s in started)
        )
        for done, was_ready in zip(started, ready):
            if not was_ready:
                tail = await agent.logs(done.kernel_id, tail=40, limit=2000)
                raise AgentError(f"a kernel did not get ready:\n{tail}")
        return started

    def _plans(
        self, session: Session, agents: dict[str, AgentBackend], network: str | None
    ) -> list[KernelPlan]:
        """Every kernel's plan (blocking: resolves mount paths, makes keys)."""
        # A session of one kernel has nobody to ssh to: no keys, no sshd competing with
        # the ipykernel's start for CPU.
        ssh = all(agent.ssh for agent in agents.values())
        keys = generate_ssh_keys() if ssh and len(session.kernels) > 1 else None
        connection = None
        if session.spec.type is SessionType.INTERACTIVE:
            connection = {
                "key": secrets.token_hex(32),
                "transport": "tcp",
                "signature_scheme": "hmac-sha256",
                "kernel_name": "python3",
            }
        trusted = bool(session.status_data.get(ADMIN_MOUNTS))
        roles = {role.name: role for role in session.spec.cluster_roles()}
        by_role: dict[str, list[Mount]] = {}
        for name, role in roles.items():
            try:
                by_role[name] = self.mounts.resolve(role.mounts, session.owner, True, trusted)
            except ValueError as exc:  # the policy or a template changed since it was made
                raise AgentError(f"mounts: {exc}") from exc
        taken = [m.target for mounts in by_role.values() for m in mounts]
        # Per agent: whether it sees the notebooks, and the address its kernels call home at.
        notebooks = {i: self.mounts.notebook_mount(session, a, taken) for i, a in agents.items()}
        hook = self.settings.kernel_env_hook
        extra_env = {i: dict(hook(session.id, i)) if hook else {} for i in agents}
        scope = self.core.require_store().id
        sftp, kept = (None, None)
        if session.spec.type is SessionType.SYSTEM:
            sftp, kept = sftp_setup(session)
        plans = []
        for kernel in session.kernels:
            agent_id = kernel.agent_id or ""
            notebook, work_dir = notebooks[agent_id]
            mounts = by_role[kernel.role_name]
            plans.append(
                KernelPlan(
                    session_id=session.id,
                    kernel_id=kernel.id,
                    hostname=kernel.hostname,
                    role=kernel.role,
                    image=roles[kernel.role_name].image or self.settings.default_image,
                    slots=kernel.slots.to_json(),
                    env={**extra_env[agent_id], **kernel_environ(session, kernel)},
                    mounts=[*mounts, notebook] if notebook is not None else mounts,
                    work_dir=work_dir,
                    labels=labels(session, kernel, scope),
                    bootstrap=bootstrap(
                        session,
                        kernel,
                        keys,
                        connection if kernel.role is KernelRole.MAIN else None,
                        sftp if kernel.role is KernelRole.MAIN else None,
                    ),
                    private={"sftp": kept} if kept and kernel.role is KernelRole.MAIN else {},
                    network=network,
                )
            )
        return plans


def _running(session: Session, started: list[KernelStarted], plans: list[KernelPlan]) -> None:
    """Record where each kernel runs and main1's Jupyter connection, then RUNNING."""
    by_id = {s.kernel_id: s for s in started}
    plan_by_id = {p.kernel_id: p for p in plans}
    for kernel in session.kernels:
        done = by_id[kernel.id]
        kernel.container_id = done.container_id
        kernel.info = {"host": done.host, "ports": dict(done.ports)}
        conn = plan_by_id[kernel.id].bootstrap.get("connection")
        if conn and "shell" in done.ports:
            kernel.info["connection"] = kernel_connection(conn, done.host, done.ports)
        sftp = sftp_record(plan_by_id[kernel.id], done)
        if sftp is not None:
            kernel.info["sftp"] = sftp
    move(session, Status.RUNNING, time.time())
