"""The store's leader: of the manager processes on one store, one runs the scheduler
and the watchdogs.

Every process on a store (the replicas of a manager service, a Jupyter server, a
console's embedded manager) serves its API and writes through the store; the one
holding the lease (``store.lease``) also runs what must run once: the scheduling
passes, the kernel-event watchers, liveness, hangs, idle rules, servers' silence,
retention, endpoints' replicas and warm pools. It renews the lease every third of
``lease_ttl``; another process takes it once it lapses (a leader killed) or at
once when released (a clean stop). A leader that cannot renew stops leading
before its lease can lapse, so two never lead at once while their clocks agree.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, Protocol

from ..store import Transaction
from ..store.lease import Lease
from .core import Core
from .watchdogs.activity import Activity
from .watchdogs.servers import ServerWatch

__all__ = ["LEADER", "Leadership", "write_notes"]

#: The lease's name in the store.
LEADER = "leader"


class LeaseSettings(Protocol):
    @property
    def replica_name(self) -> str: ...

    @property
    def lease_ttl(self) -> float: ...


class Leadership:
    """Takes, renews and gives up the lease, and starts and stops the leader's work."""

    def __init__(
        self, core: Core, settings: LeaseSettings, lead: Callable[[], Coroutine[Any, Any, None]]
    ) -> None:
        self.core = core
        self.settings = settings
        #: Starts the leader's work (a task of its own, ended when leading stops).
        self._lead = lead
        self.leading = False
        #: The lease's epoch while this process leads.
        self.epoch = 0
        #: Until when (monotonic) the lease surely holds after the last renewal.
        self._holds_until = 0.0
        self._failing = False
        #: The task that started the leader's work, while it runs.
        self.starting: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.settings.replica_name

    def every(self) -> float:
        return self.settings.lease_ttl / 3

    async def loop(self) -> None:
        """Take or renew the lease every third of its time, until cancelled."""
        what = "keeping the leader's lease"
        await self.core.every(self.every, self.step, what, minimum=0.05).run()

    async def step(self) -> None:
        """Take (or renew) the lease; start or stop leading as the store says."""
        ttl = self.settings.lease_ttl
        asked = time.monotonic()
        take = partial(Transaction.take_lease, name=LEADER, holder=self.name, ttl=ttl)
        try:
            lease: Lease = await self.core.db(take, serial=False)
        except Exception as exc:  # the store is away (restarting): the lease may lapse
            if not self._failing:
                self.core.log.warning("bai-jupyter: cannot reach the store's lease: %s", exc)
            self._failing = True
            if self.leading and time.monotonic() >= self._holds_until:
                await self.step_down("its lease lapsed while the store did not answer")
            return
        if self._failing:
            self.core.log.info("bai-jupyter: the store's lease answers again")
        self._failing = False
        if not lease.held_by(self.name):
            if self.leading:
                await self.step_down(f"{lease.holder or 'nobody'} holds the lease now")
            return
        # It lapses ttl after the store wrote it, which was after ``asked``; a tenth spare.
        self._holds_until = asked + ttl * 0.9
        if not self.leading:
            self.leading, self.epoch = True, lease.epoch
            self.core.log.info("bai-jupyter: %s leads the store (epoch %d)", self.name, lease.epoch)
            self.starting = self.core.spawn(self._lead(), leading=True)
            self.starting.add_done_callback(self._started)

    def _started(self, task: asyncio.Task[None]) -> None:
        if self.starting is task:
            self.starting = None

    async def step_down(self, why: str) -> None:
        """Stop the leader's work (its loops; starts and tear-downs under way finish)."""
        self.leading = False
        tasks = list(self.core.leading)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        self.core.log.warning("bai-jupyter: %s no longer leads the store: %s", self.name, why)

    async def release(self) -> None:
        """A clean stop: give the lease up, so that another process leads at once."""
        if not self.leading:
            return
        self.leading = False
        release = partial(Transaction.release_lease, name=LEADER, holder=self.name)
        try:
            await self.core.db(release, serial=False)
        except Exception as exc:  # it lapses on its own
            self.core.log.warning("bai-jupyter: could not release the lease: %s", exc)
            return
        self.core.log.info("bai-jupyter: %s no longer leads the store: stopped", self.name)

    async def view(self) -> dict[str, Any]:
        """Who leads, for the scheduler view: this replica's name and the lease."""
        lease = await self.core.query(partial(Transaction.read_lease, name=LEADER))
        return {"replica": self.name, "leader": lease.to_json()}


async def write_notes(core: Core, servers: ServerWatch, activity: Activity) -> None:
    """Write the heartbeats and uses this process received, for the leader to read."""
    heard, used = servers.unsaved(), activity.unsaved()
    if heard or used:

        def write(tx: Transaction) -> None:
            tx.note_servers(heard)
            tx.note_activity(used)

        await core.db(write, serial=False)
