"""Live usage of running sessions, per kernel, as ``usage`` events.

Every manager process on a store serves event streams, so every process reads
usage for its own streams (nothing goes through the store): while at least one
stream of this process asked for usage (``?usage=1``), one loop reads, every
``usage_interval``, every running session's kernels on this process's agents,
one reading per agent (one engine job for all its kernels), and tells one event
per session to those streams, which pass on only what their caller may see. With
no such stream it reads nothing. Rates (CPU %, network) come from two readings
in a row; the previous reading per kernel is all it keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from decimal import Decimal
from typing import Any, Protocol

from ..agents.base import AgentError
from ..agents.usage import KernelReading
from ..model import ACTIVE, Kernel, Session
from .core import Core

__all__ = ["UsageWatch", "kernel_usage"]


class _Settings(Protocol):
    @property
    def usage_interval(self) -> float: ...


def _rate(new: int | None, old: int | None, seconds: float) -> float | None:
    if new is None or old is None or seconds <= 0:
        return None
    return max(0.0, (new - old) / seconds)


def kernel_usage(kernel: Kernel, new: KernelReading, old: KernelReading | None) -> dict[str, Any]:
    """One kernel's usage as events carry it: CPU % of its CPU slots (and cores in use),
    memory used of its limit, network bytes per second; ``None`` where not known (the
    rates need a reading before)."""
    cpu_slots = float(kernel.slots.get("cpu") or Decimal(0))
    seconds = new.at - old.at if old is not None else 0.0
    cores = None
    if old is not None and new.cpu_seconds is not None and old.cpu_seconds is not None:
        cores = max(0.0, new.cpu_seconds - old.cpu_seconds) / seconds if seconds > 0 else None
    mem_slot = kernel.slots.get("mem")
    return {
        "kernel": kernel.hostname,
        "agent": kernel.agent_id,
        "cpu_cores": None if cores is None else round(cores, 4),
        "cpu_slots": cpu_slots,
        "cpu_percent": None
        if cores is None or not cpu_slots
        else round(100 * cores / cpu_slots, 1),
        "mem_bytes": new.mem_bytes,
        "mem_limit": new.mem_limit or (int(mem_slot) if mem_slot else None),
        "net_rx_rate": _rate(new.rx_bytes, old.rx_bytes if old else None, seconds),
        "net_tx_rate": _rate(new.tx_bytes, old.tx_bytes if old else None, seconds),
    }


class UsageWatch:
    """Reads running sessions' usage while some stream of this process follows it."""

    def __init__(self, core: Core, settings: _Settings) -> None:
        self.core = core
        self.settings = settings
        #: kernel id → its last reading (the base of the next rates).
        self._last: dict[str, KernelReading] = {}
        #: kernel id → its usage from that reading (told again until a new sample comes).
        self._told: dict[str, dict[str, Any]] = {}
        #: session id → its last usage event (what a status asks, when fresh).
        self.latest: dict[str, dict[str, Any]] = {}
        self._task: asyncio.Task[Any] | None = None

    def wake(self) -> None:
        """A stream asks for usage: start reading, unless already reading or switched off."""
        if self.settings.usage_interval > 0 and (self._task is None or self._task.done()):
            self._task = self.core.spawn(self._loop(), loop=True)

    def events(self, since: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """The manager's events (as ``BaiSessionManager.events``) and the usage events,
        read while such a stream is open."""
        self.wake()
        return self.core.hub.events(since, usage=True)

    async def _loop(self) -> None:
        await asyncio.sleep(0.05)  # the stream that woke it subscribes meanwhile
        while self.core.hub.usage_followers and self.settings.usage_interval > 0:
            started = time.monotonic()
            try:
                sessions = await self.core.list_sessions(statuses=ACTIVE)
                for event in await self.read(sessions):
                    self.core.hub.tell(event)
            except Exception as exc:  # a store or engine away: read again next time
                self.core.log.warning("bai-jupyter: reading usage failed: %s", exc)
            await asyncio.sleep(
                max(0.0, self.settings.usage_interval - (time.monotonic() - started))
            )
        self._last.clear()
        self._told.clear()

    async def read(self, sessions: Iterable[Session]) -> list[dict[str, Any]]:
        """Read the kernels of ``sessions`` now (one call per agent, all at once); one usage
        event per session that had a kernel read."""
        by_agent: dict[str, dict[str, str | None]] = {}
        kernels: dict[str, tuple[Session, Kernel]] = {}
        for session in sessions:
            for kernel in session.kernels:
                if kernel.agent_id in self.core.agents and kernel.status in ACTIVE:
                    by_agent.setdefault(kernel.agent_id, {})[kernel.id] = kernel.container_id
                    kernels[kernel.id] = (session, kernel)
        readings = await asyncio.gather(
            *(self._read_agent(agent_id, ks) for agent_id, ks in by_agent.items())
        )
        per_session: dict[str, list[dict[str, Any]]] = {}
        for reading in (r for rs in readings for r in rs):
            session, kernel = kernels[reading.kernel_id]
            old = self._last.get(reading.kernel_id)
            if old is not None and old.at == reading.at and reading.kernel_id in self._told:
                usage = self._told[reading.kernel_id]  # no new sample since: the same rates
            else:
                usage = kernel_usage(kernel, reading, old)
            self._last[reading.kernel_id], self._told[reading.kernel_id] = reading, usage
            per_session.setdefault(session.id, []).append(usage)
        for gone in set(self._last) - set(kernels):
            del self._last[gone]
            self._told.pop(gone, None)
        now, told = time.time(), {}
        for session, _ in kernels.values():
            if session.id in per_session and session.id not in told:
                told[session.id] = {
                    **usage_event(session, per_session[session.id], now),
                    "interval": self.settings.usage_interval,
                }
        self.latest = told
        return list(told.values())

    async def _read_agent(
        self, agent_id: str, kernels: Mapping[str, str | None]
    ) -> list[KernelReading]:
        with contextlib.suppress(AgentError):
            return await self.core.agents[agent_id].usage(kernels)
        return []

    async def now(self, session: Session) -> dict[str, Any]:
        """The session's usage: the last event when it is fresh, else read until every
        kernel read has its rates (two samples apart; a few seconds at most)."""
        latest = self.latest.get(session.id)
        if latest is not None and time.time() - latest["at"] < 2 * self.settings.usage_interval:
            return latest
        watch = UsageWatch(self.core, self.settings)  # its own readings: not this loop's base
        started = time.monotonic()
        while True:
            events = await watch.read([session])
            waited = time.monotonic() - started
            done = events and all(k["cpu_percent"] is not None for k in events[0]["kernels"])
            if done or waited > 5 or (not events and waited > 2.5):
                return events[0] if events else usage_event(session, [], time.time())
            await asyncio.sleep(0.5)


def usage_event(session: Session, kernels: list[dict[str, Any]], at: float) -> dict[str, Any]:
    """The ``usage`` event of one session (its kernels in hostname order)."""
    return {
        "type": "usage",
        "session_id": session.id,
        "name": session.name,
        "owner": session.owner,
        "at": at,
        "kernels": sorted(kernels, key=lambda k: (k["kernel"] != "main1", k["kernel"])),
    }
