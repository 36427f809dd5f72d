"""The scheduling loop: a pass on every enqueue, every end of a session, and periodically.

The pass itself (``scheduler.queue.run_pass``) decides and reserves inside one
store transaction; this module loads each resource group's plugins, runs the
passes off the event loop, tells the watchers, and starts what was placed.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from ...errors import ConfigError, NotFound
from ...model import TERMINAL, Session, Status, session_event
from ...scheduler import SchedulerConfig, SchedulerConfigError, load_plugins
from ...scheduler.context import PassContext
from ...scheduler.placement import AgentPool
from ...scheduler.queue import load_snapshot, run_pass
from ...store import Transaction
from ..core import Core, GroupScheduler
from ..lifecycle.start_stop import Lifecycle
from ..pools.warm_pool import PoolKeeper
from ..requests.policies import Policies

__all__ = ["Scheduling", "load_groups"]

_ENDED = {s.value for s in TERMINAL}
#: Sessions whose why-pending record changed are re-announced only up to this many per pass.
_ANNOUNCED_FAILURES = 100


def _log_why_pending(tx: Transaction, session_ids: list[str]) -> None:
    """Log the events of sessions whose why-pending record a pass wrote."""
    found = (tx.get_session(sid) for sid in session_ids)
    tx.add_events([session_event(s) for s in found if s is not None])


@dataclass
class PassStats:
    """How long a group's passes took (since this manager started): the operator's view of
    the scheduler's cost, in the queue view."""

    passes: int = 0
    placed: int = 0
    total: float = 0.0
    longest: float = 0.0
    last: float = 0.0

    def record(self, seconds: float, placed: int) -> None:
        self.passes += 1
        self.placed += placed
        self.total += seconds
        self.longest = max(self.longest, seconds)
        self.last = seconds

    def to_json(self) -> dict[str, Any]:
        mean = self.total / self.passes if self.passes else 0.0
        return {
            "passes": self.passes,
            "placed": self.placed,
            "last_ms": round(self.last * 1e3, 3),
            "mean_ms": round(mean * 1e3, 3),
            "max_ms": round(self.longest * 1e3, 3),
        }


def load_groups(groups: Mapping[str, Mapping[str, Any]]) -> dict[str, GroupScheduler]:
    """Each configured resource group with its sequencer and selector; ConfigError if bad."""
    loaded = {}
    for name, conf in groups.items():
        try:
            config = SchedulerConfig.from_group(conf)
            sequencer, selector = load_plugins(config)
        except SchedulerConfigError as exc:
            raise ConfigError(f"resource group {name!r}: {exc}") from exc
        loaded[name] = GroupScheduler(config, sequencer, selector, dict(conf))
    return loaded


class _Settings(Protocol):
    @property
    def pass_interval(self) -> float: ...

    @property
    def pass_gap(self) -> float: ...


class Scheduling:
    """Runs passes for every resource group and hands placed sessions to the lifecycle."""

    def __init__(
        self,
        core: Core,
        settings: _Settings,
        lifecycle: Lifecycle,
        policies: Policies,
        pool_keeper: PoolKeeper,
    ) -> None:
        self.core = core
        self.settings = settings
        self.lifecycle = lifecycle
        #: Each owner's limits in a pass (the policies', else the group's own).
        self.policies = policies
        #: Told each group's result after its pass (the warm pools give way to who waits).
        self.pool_keeper = pool_keeper
        #: Per group: how long its passes took.
        self.stats: dict[str, PassStats] = defaultdict(PassStats)

    def group(self, name: str) -> GroupScheduler:
        try:
            return self.core.groups[name]
        except KeyError:
            raise NotFound(f"no resource group {name!r}") from None

    async def loop(self) -> None:
        """Pass whenever woken, and at least every ``pass_interval`` s; survive anything."""
        core = self.core
        interval = lambda: self.settings.pass_interval  # noqa: E731
        gap = lambda: self.settings.pass_gap  # noqa: E731
        what = "scheduling pass"
        await core.every(interval, self.pass_now, what, event=core.wakeup, gap=gap).run()

    async def follow(self) -> None:
        """Pass for what other processes on the store did (a create through another
        replica, a session another one ended): their events are the only word of it.
        A session is new once (its first PENDING event) and makes room once (ended)."""
        pending: set[str] = set()
        async for event in self.core.hub.events():
            session_id, status = event.get("session_id"), event.get("status")
            if status == Status.PENDING.value:
                if session_id not in pending:
                    pending.add(str(session_id))
                    self.core.wake()
            else:
                pending.discard(str(session_id))
                if status in _ENDED:
                    self.core.wake()

    async def pass_now(self) -> None:
        """One pass over every resource group; start what was placed."""
        core = self.core
        store = core.require_store()
        for name, group in core.groups.items():
            started = time.perf_counter()
            result = await asyncio.to_thread(
                run_pass,
                store,
                name,
                group.config,
                group.sequencer,
                group.selector,
                None,  # the time it holds the store's write lock
                self.policies.scheduler_policy,
                self.policies.key(),
            )
            self.stats[name].record(time.perf_counter() - started, len(result.placements))
            # Placements and cancellations logged their events in the pass; why-pending
            # records are told too, up to a number (a queue of thousands would flood),
            # but not by a skipped pass: it only counted the tries of unchanged records.
            failed = list(result.failures)
            if failed and not result.skipped and len(failed) <= _ANNOUNCED_FAILURES:
                await core.db(partial(_log_why_pending, session_ids=failed))
            core.hub.poke()
            for placement in result.placements:
                core.spawn(self.lifecycle.start(placement.session_id))
            if result.cancellations:
                core.wake()  # dependants of what was cancelled
            if result.failures:
                await self.pool_keeper.give_way(name, result)

    async def queues(self) -> dict[str, list[Session]]:
        """Each group's pending sessions in the order the next pass will try them."""
        now = time.time()
        groups = dict(self.core.groups)

        def read(tx: Transaction) -> dict[str, list[Session]]:
            return {name: _queue_order(tx, name, group, now) for name, group in groups.items()}

        return await self.core.query(read)


def _queue_order(tx: Transaction, name: str, group: GroupScheduler, now: float) -> list[Session]:
    """Priority bands first (highest first), each in its sequencer's order, from the same
    snapshot a pass reads."""
    snapshot = load_snapshot(tx, name)
    ctx = PassContext(now, group.config, snapshot, AgentPool(snapshot.agents).capacity)
    bands: dict[int, list[Session]] = defaultdict(list)
    for session in snapshot.pending:
        bands[session.spec.priority].append(session)
    return [s for p in sorted(bands, reverse=True) for s in group.sequencer.order(bands[p], ctx)]
