"""What every part of the manager shares: the store, the agents, the event hub, its tasks.

Every transition goes through :meth:`Core.edit`: one store transaction (checked
against the lifecycle table) that logs its event too, which the hub then reads and
tells. Store calls run in a thread, so nothing here blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from traitlets.config import LoggingConfigurable

from ..agents.base import AgentBackend
from ..errors import InvalidRequest, NotFound, Timeout, Unavailable
from ..loops import Periodic
from ..model import ACTIVE, TRANSITIONS, Kernel, Session, Status
from ..scheduler import SchedulerConfig
from ..scheduler.selectors import AgentSelector
from ..scheduler.sequencers import Sequencer
from ..store import AmbiguousKey, Store, Transaction
from ..store.notify import Listener
from .events import EventHub

__all__ = ["Core", "GroupScheduler", "Settings", "find_kernel", "move"]

T = TypeVar("T")

#: A session whose kernels are up (a restart keeps them up).


class Settings(Protocol):
    """The manager's settings its parts read (the traits of ``BaiSessionManager``)."""

    @property
    def start_timeout(self) -> float: ...

    @property
    def log_limit(self) -> int: ...

    @property
    def log_tail(self) -> int: ...

    @property
    def default_image(self) -> str: ...

    @property
    def registries(self) -> list[str]: ...


@dataclass
class GroupScheduler:
    """A resource group's scheduler settings and its sequencer and selector plugins."""

    config: SchedulerConfig
    sequencer: Sequencer
    selector: AgentSelector
    #: The group's settings as configured (``BaiSessionManager.resource_groups``).
    settings: dict[str, Any] = field(default_factory=dict)


def move(session: Session, status: Status, now: float, info: str | None = None) -> None:
    """Move a session and, where the table allows, its kernels to ``status``."""
    for kernel in session.kernels:
        if kernel.status is not status and status in TRANSITIONS[kernel.status]:
            kernel.set_status(status, info)
    session.set_status(status, now, info)


def find_kernel(session: Session, hostname: str) -> Kernel:
    """A session's kernel by hostname (``sub1``) or id; NotFound names the ones it has."""
    for kernel in session.kernels:
        if hostname in (kernel.hostname, kernel.id):
            return kernel
    hosts = ", ".join(k.hostname for k in session.kernels)
    raise NotFound(f"session {session.id} has no kernel {hostname!r} (kernels: {hosts})")


class Core:
    """The store, the connected agents, the resource groups, events and background tasks."""

    def __init__(self, owner: LoggingConfigurable) -> None:
        self._owner = owner
        self.store: Store | None = None
        self.agents: dict[str, AgentBackend] = {}
        #: Agents that stopped answering for ``agent_lost_timeout``: nothing is placed on or
        #: asked of them until they answer again (``manager.liveness``).
        self.lost: set[str] = set()
        #: Agents that failed to remove an ended session's kernels (down for a moment, not
        #: lost yet): swept when they next answer (``manager.liveness``).
        self.unswept: set[str] = set()
        self.groups: dict[str, GroupScheduler] = {}
        self.hub = EventHub()
        #: Every background task (starts, tear-downs, event handling, loops).
        self.tasks: set[asyncio.Task[Any]] = set()
        #: The long-running loops among them (cancelled on stop, and awaited).
        self.loops: set[asyncio.Task[Any]] = set()
        #: The loops only the store's leader runs (cancelled when it stops leading).
        self.leading: set[asyncio.Task[Any]] = set()
        #: Set to ask for a scheduling pass now (the scheduling loop waits on it).
        self.wakeup = asyncio.Event()
        #: The follower of the store's change log, and its PostgreSQL listener.
        self._follower: asyncio.Task[None] | None = None
        self._listener: Listener | None = None

    @property
    def log(self) -> logging.Logger | logging.LoggerAdapter[Any]:
        """The manager's log (its ``log`` trait may be set after it was made)."""
        log: logging.Logger | logging.LoggerAdapter[Any] = self._owner.log
        return log

    # --- tasks and the scheduler's wake-up ---------------------------------------------------

    def spawn(
        self, coro: Coroutine[Any, Any, Any], loop: bool = False, leading: bool = False
    ) -> asyncio.Task[Any]:
        """Run ``coro`` in the background; its failure is logged, never lost. ``leading``:
        a loop of the store's leader (a loop, ended when this process stops leading)."""
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self.tasks.add(task)
        if loop or leading:
            self.loops.add(task)
        if leading:
            self.leading.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        self.loops.discard(task)
        self.leading.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error("bai-jupyter: background task failed", exc_info=task.exception())

    def every(
        self,
        interval: Callable[[], float],
        step: Callable[[], Awaitable[object]],
        what: str,
        *,
        minimum: float = 0.0,
        wait_first: bool = True,
        event: asyncio.Event | None = None,
        gap: Callable[[], float] = lambda: 0.0,
    ) -> Periodic:
        """A loop that runs ``step`` every ``interval()`` seconds (or when ``event`` is set)
        until cancelled; a step that fails goes to the manager's log and the loop goes on
        (a watchdog must survive what it meets)."""
        log = lambda: self.log  # noqa: E731
        return Periodic(
            step, interval, what, log, minimum=minimum, wait_first=wait_first, event=event, gap=gap
        )

    def wake(self) -> None:
        """Ask for a scheduling pass now."""
        self.wakeup.set()

    # --- the store ----------------------------------------------------------------------------

    def require_store(self) -> Store:
        if self.store is None:
            raise Unavailable("the session manager is not started")
        return self.store

    async def db(
        self, fn: Callable[[Transaction], T], write: bool = True, serial: bool = True
    ) -> T:
        """Run ``fn(tx)`` in a write (or read-only) transaction, in a thread (``serial``:
        see :meth:`Store.write`)."""
        store = self.require_store()

        def run() -> T:
            with store.write(serial) if write else store.read() as tx:
                return fn(tx)

        return await asyncio.to_thread(run)

    async def query(self, fn: Callable[[Transaction], T]) -> T:
        return await self.db(fn, write=False)

    async def follow_events(
        self, interval: Callable[[], float], retention: Callable[[], float]
    ) -> None:
        """Tell subscribers every session event logged in the store from now on (whoever
        logged it), until :meth:`stop_events`: read every ``interval()`` seconds, at once
        after this process's own writes and, on PostgreSQL, after anyone's (NOTIFY)."""
        store = self.require_store()
        await self.hub.open(_StoreEventLog(self))
        loop = asyncio.get_running_loop()

        def woken() -> None:  # in the listener's thread
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(self.hub.poke)

        self._listener = store.listen(woken)
        # Not one of the tasks: stopping waits on those, and this one runs to the end.
        self._follower = asyncio.ensure_future(
            self.hub.follow(interval, retention, lambda: self.log)
        )

    async def stop_events(self) -> None:
        if self._follower is not None:
            self.hub.close()  # it ends after the read under way, which holds a connection
            done, _ = await asyncio.wait([self._follower], timeout=30)
            if not done:
                self._follower.cancel()
            self._follower = None
        if self._listener is not None:
            await asyncio.to_thread(self._listener.stop)
            self._listener = None

    async def edit(self, session_id: str, change: Callable[[Session], None]) -> Session:
        """Change a session in one transaction (validated by the lifecycle table), then tell."""
        store = self.require_store()

        def run() -> Session:
            with store.edit(session_id) as session:
                change(session)
            return session

        session = await asyncio.to_thread(run)
        self.hub.poke()  # its event is in the store's log: tell it now
        return session

    async def transition(self, session_id: str, status: Status, info: str | None = None) -> Session:
        return await self.edit(session_id, lambda s: move(s, status, time.time(), info))

    async def get(self, key: str, owner: str | None = None) -> Session:
        """A session by id, unique id prefix or name (names need the owner); NotFound
        otherwise, InvalidRequest for a prefix of several."""
        try:
            session = await self.query(lambda tx: tx.get_session(key, owner))
        except AmbiguousKey as exc:
            raise InvalidRequest(str(exc)) from None
        if session is None:
            raise NotFound(f"no session {key!r}" + (f" of {owner}" if owner else ""))
        return session

    async def list_sessions(
        self, owner: str | None = None, statuses: Iterable[Status] | None = None
    ) -> list[Session]:
        """Sessions, oldest first, of one owner (or everyone's) in the given statuses."""
        wanted = None if statuses is None else list(statuses)
        return await self.query(lambda tx: tx.list_sessions(owner=owner, statuses=wanted))

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
        with self.hub.subscription() as queue:
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

    # --- kernels ------------------------------------------------------------------------------

    def agent_of(self, kernel: Kernel) -> AgentBackend:
        """The connected agent a kernel runs on; Unavailable when it is not connected."""
        agent = self.agents.get(kernel.agent_id or "")
        if agent is None:
            where = f"{kernel.hostname} ({kernel.agent_id})"
            raise Unavailable(f"the agent of {where} is not connected")
        return agent

    async def running_kernel(
        self, key: str, hostname: str, owner: str | None
    ) -> tuple[AgentBackend, str]:
        """The agent and kernel id of one kernel of a RUNNING session; Unavailable otherwise."""
        session = await self.get(key, owner)
        if session.status not in ACTIVE:
            raise Unavailable(f"session {session.id} is {session.status.value}, not RUNNING")
        target = find_kernel(session, hostname)
        return self.agent_of(target), target.id


class _StoreEventLog:
    """The store's change log, read and pruned in a thread."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def after(self, seq: int, limit: int) -> Awaitable[list[tuple[int, dict[str, Any]]]]:
        return self.core.query(lambda tx: tx.events_after(seq, limit))

    def bounds(self) -> Awaitable[tuple[int, int]]:
        return self.core.query(lambda tx: tx.event_bounds())

    def prune(self, before: float) -> Awaitable[int]:
        return self.core.db(lambda tx: tx.prune_events(before))
