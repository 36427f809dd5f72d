"""Warm pools: interactive sessions started ahead of demand, claimed by matching launches.

Each pool (:mod:`.config`) keeps ``size`` sessions of one request started
and idle, owned by no user (``POOL_OWNER``). A create whose request, after
templates and defaults, equals a pool's (and that mounts the notebooks where the
pool does) takes its oldest warm session instead of queueing: in one store
transaction the session becomes the caller's (owner, meta, priority; its id,
SSH keys and kernel token were never anyone else's), its kernel moves to the
notebook's folder (:mod:`.handover`), and the pool refills in the background
(:mod:`.claims`; the keeper here makes warm sessions through admission, never claims).

Nobody is passed over: a claim happens only while nobody waits in the resource
group's queue and the caller's limits allow one more session of that size, and
a pool refills only while nobody waits. Warm sessions hold real slots, counted
by the scheduler like any session's, and give them back: when a user's session
does not fit, warm sessions are ended (``pool-pressure``) until it would. A
changed ``warm_pools`` setting ends the warm sessions it no longer describes
(``pool-drained``); a manager that stops ends its pool's unclaimed sessions, and
one that was killed finds them when it starts again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from functools import partial
from typing import Any, Protocol

from ...errors import BaiError
from ...model import NOT_ENDED, Agent, Session, SessionSpec, Status
from ...request import spec_to_json
from ...resources import ResourceSlot
from ...scheduler.dispatcher import PassResult
from ...scheduler.placement import never_fits
from ...store import Transaction
from ..core import Core
from ..lifecycle.start_stop import Lifecycle
from ..owners import exempt
from ..requests.admission import Admission
from .config import (
    MARK,
    POOL_OWNER,
    PoolConfig,
    count,
    pool_key,
    pool_stats,
    reserved,
    warm_mark,
)

__all__ = ["POOL_OWNER", "PoolKeeper"]


class PoolSettings(Protocol):
    @property
    def warm_pool_interval(self) -> float: ...

    @property
    def notebook_root(self) -> str | None: ...


class PoolKeeper:
    """Keeps the configured pools filled and gives way under pressure (claims are
    :class:`~.claims.PoolClaims`')."""

    def __init__(
        self, core: Core, settings: PoolSettings, admission: Admission, lifecycle: Lifecycle
    ) -> None:
        self.core = core
        self.settings = settings
        self.admission = admission
        self.lifecycle = lifecycle
        #: The pools as configured (``warm_pools``), loaded when the manager starts.
        self.configs: list[PoolConfig] = []
        #: Per pool: its resolved key and spec, or why its request is refused.
        self.resolved: dict[str, tuple[str, SessionSpec] | str] = {}
        self._wake = asyncio.Event()

    def load(self, configs: list[PoolConfig]) -> None:
        """Keep these pools from now on (the manager loads its setting when it starts)."""
        self.configs = list(configs)

    # --- the keeper ---------------------------------------------------------------------------

    async def loop(self) -> None:
        """A round every ``warm_pool_interval`` seconds, or at once when woken."""
        interval = lambda: self.settings.warm_pool_interval  # noqa: E731
        what = "the warm pools' round"
        periodic = self.core.every(
            interval, self.round, what, minimum=0.1, wait_first=False, event=self._wake
        )
        await periodic.run()

    def wake(self) -> None:
        """Ask for a round now (a claim took a warm session)."""
        self._wake.set()

    async def _resolve(self, pool: PoolConfig) -> tuple[str, SessionSpec] | str:
        """The pool's spec after its template and the defaults, as a launch's would be."""
        try:
            admitted = await self.admission.admit(
                pool.request, POOL_OWNER, pool.template, dry_run=True
            )
            made = await self.admission.enqueue(admitted, {}, dry_run=True)
        except BaiError as exc:
            return exc.message
        return pool_key(made.spec), made.spec

    def has_notebook(self, pool: PoolConfig) -> bool:
        """Whether the pool's warm sessions mount the notebooks' root."""
        return pool.notebook and bool(self.settings.notebook_root)

    async def round(self) -> None:
        """End what no pool describes, refill what is short while nobody waits."""
        sessions = await self.core.list_sessions(owner=POOL_OWNER, statuses=NOT_ENDED)
        if not self.configs and not sessions:
            return
        for pool in self.configs:
            previous = self.resolved.get(pool.name)
            self.resolved[pool.name] = resolved = await self._resolve(pool)
            if isinstance(resolved, str) and resolved != previous:
                self.core.log.error("bai-jupyter: warm pool %s: %s", pool.name, resolved)
        now = time.time()
        mine: dict[str, list[Session]] = {}
        for session in sessions:
            name = str(warm_mark(session).get("pool"))
            found = self.resolved.get(name)
            if not _current(session, found):
                await self.end(session, "pool-drained")
            elif isinstance(found, tuple) and not reserved(session, now):
                mine.setdefault(name, []).append(session)
        waiting = await self._groups_waiting()
        for pool in self.configs:
            if isinstance(found := self.resolved[pool.name], tuple):
                await self._fill(pool, found[0], mine.get(pool.name, []), waiting)

    async def _groups_waiting(self) -> set[str]:
        """Resource groups where a user's session waits."""
        pending = await self.core.list_sessions(statuses=[Status.PENDING])
        return {s.spec.resource_group for s in pending if not exempt(s.owner)}

    async def _fill(
        self, pool: PoolConfig, key: str, live: list[Session], waiting: set[str]
    ) -> None:
        resolved = self.resolved[pool.name]
        assert not isinstance(resolved, str)
        spec = resolved[1]
        pending = [s for s in live if s.status is Status.PENDING]
        if spec.resource_group in waiting:  # a user waits: nothing new, nothing in the way
            for session in pending:
                await self.end(session, "pool-pressure")
            return
        extra = len(live) - pool.size
        for session in sorted(live, key=lambda s: (s.status is Status.RUNNING, -s.created_at)):
            if extra <= 0:
                break
            await self.end(session, "pool-drained")
            extra -= 1
        held = sum((s.spec.total_resources for s in live), ResourceSlot())
        for _ in range(pool.size - len(live)):
            if pool.max_slots is not None and not (held + spec.total_resources).fits_in(
                pool.max_slots
            ):
                return
            if not await self._fits_now(spec):
                return
            meta: dict[str, Any] = {MARK: {"pool": pool.name, "key": key}}
            if self.has_notebook(pool):
                meta["notebook_dir"] = self.settings.notebook_root
            request = {**pool.request, "priority": 0}  # behind every user's session
            try:
                admitted = await self.admission.admit(request, POOL_OWNER, pool.template)
                await self.admission.enqueue(admitted, meta)
            except BaiError as exc:
                self.core.log.warning("bai-jupyter: warm pool %s: %s", pool.name, exc.message)
                return
            held = held + spec.total_resources

    async def _fits_now(self, spec: SessionSpec) -> bool:
        """Whether the group's agents hold ``spec`` now, without waiting."""
        agents = await self.core.query(lambda tx: tx.list_agents(spec.resource_group))
        usable = [a for a in agents if a.id not in self.core.lost]
        return never_fits(spec, _with(usable, {a.id: a.free for a in usable})) is None

    async def end(self, session: Session, reason: str) -> None:
        """End a warm session with ``reason``; one already ended is no error."""
        try:
            await self.lifecycle.destroy(session.id, None, reason)
        except BaiError as exc:  # ended meanwhile
            self.core.log.debug("bai-jupyter: warm session %s: %s", session.id, exc)

    async def drain(self) -> None:
        """End every unclaimed warm session (the manager stops)."""
        for session in await self.core.list_sessions(owner=POOL_OWNER, statuses=NOT_ENDED):
            await self.end(session, "pool-drained")

    # --- pressure -----------------------------------------------------------------------------

    async def give_way(self, group: str, result: PassResult) -> None:
        """After a pass: end warm sessions while a user's session waits for their room."""
        short = [
            sid
            for sid, record in result.failures.items()
            if [p.get("name") for p in record.get("failed_predicates") or []] == ["resources"]
        ]
        if not short:
            return

        def read(tx: Transaction) -> tuple[list[Session], list[Session], list[Agent]]:
            waiting = [s for sid in short if (s := tx.get_session(sid)) is not None]
            warm = tx.list_sessions(owner=POOL_OWNER, statuses=NOT_ENDED, resource_group=group)
            return waiting, warm, tx.list_agents(group)

        waiting, warm, agents = await self.core.query(read)
        waiting = [s for s in waiting if not exempt(s.owner)]
        free = {a.id: a.free for a in agents}
        _give_back(free, [s for s in warm if s.status is Status.TERMINATING])  # on their way
        now = time.time()
        warm = sorted(
            (
                s
                for s in warm
                if s.status.occupies and s.status is not Status.TERMINATING and not reserved(s, now)
            ),
            key=lambda s: s.created_at,
        )
        ending: list[Session] = []
        for session in waiting:
            if not warm or not _fits(session.spec, agents, free, warm):
                continue
            while warm and never_fits(session.spec, _with(agents, free)) is not None:
                ending.append(warm.pop(0))
                _give_back(free, ending[-1:])
        for session in ending:
            name = str(warm_mark(session).get("pool", ""))
            await self.core.db(partial(count, name=name, what="given_way"))
            await self.end(session, "pool-pressure")

    # --- what the API shows -------------------------------------------------------------------

    async def view(self) -> list[dict[str, Any]]:
        """Each pool: its settings, its sessions by state, and its claim counts."""
        sessions = await self.core.list_sessions(owner=POOL_OWNER, statuses=NOT_ENDED)
        names = [p.name for p in self.configs]
        stats = await self.core.query(lambda tx: {n: pool_stats(tx, n) for n in names})
        now = time.time()
        reply = []
        for pool in self.configs:
            resolved = self.resolved.get(pool.name)
            live = [s for s in sessions if warm_mark(s).get("pool") == pool.name]
            current = [s for s in live if _current(s, resolved)]
            warm = [s for s in current if s.status is Status.RUNNING and not reserved(s, now)]
            entry: dict[str, Any] = {
                "name": pool.name,
                "size": pool.size,
                "kernelspec": pool.kernelspec,
                "template": pool.template,
                "notebook": self.has_notebook(pool),
                "max_slots": None if pool.max_slots is None else pool.max_slots.to_json(),
                "warm": len(warm),
                "starting": len([s for s in current if s.status is not Status.RUNNING]),
                "draining": len(live) - len(current),
                "held": sum((s.spec.total_resources for s in live), ResourceSlot()).to_json(),
                "sessions": [s.id for s in current],
                **stats[pool.name],
            }
            if isinstance(resolved, str):
                entry["error"] = resolved
            elif resolved is not None:
                spec_json = spec_to_json(resolved[1])
                entry["request"] = {k: v for k, v in spec_json.items() if k != "name"}
                entry["resource_group"] = resolved[1].resource_group
            reply.append(entry)
        return reply


def _current(session: Session, resolved: tuple[str, SessionSpec] | str | None) -> bool:
    """Whether a pool's session serves its request as now configured (else it drains).

    Before the pool's first round nothing is known to (a restarted manager may find
    sessions of an older setting). A pool whose request cannot be checked now (an
    engine that does not answer, a template just removed) keeps what it has: it is
    neither drained nor refilled.
    """
    if resolved is None:
        return False
    return isinstance(resolved, str) or warm_mark(session).get("key") == resolved[0]


def _with(agents: list[Agent], free: Mapping[str, ResourceSlot]) -> list[Agent]:
    """The schedulable agents as if ``free`` were all they had."""
    return [
        dataclasses.replace(a, capacity=free[a.id], occupied=ResourceSlot())
        for a in agents
        if a.schedulable
    ]


def _give_back(free: dict[str, ResourceSlot], sessions: list[Session]) -> None:
    """Count what ``sessions`` hold as free on their agents."""
    for session in sessions:
        for kernel in session.kernels:
            if kernel.agent_id in free:
                free[kernel.agent_id] = free[kernel.agent_id] + kernel.slots


def _fits(
    spec: SessionSpec,
    agents: list[Agent],
    free: Mapping[str, ResourceSlot],
    warm: list[Session],
) -> bool:
    """Whether ``spec`` would fit were every one of ``warm`` given back."""
    room = dict(free)
    _give_back(room, warm)
    return never_fits(spec, _with(agents, room)) is None
