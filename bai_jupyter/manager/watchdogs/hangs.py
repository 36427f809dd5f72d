"""Hang tolerance: a session stuck starting or ending is forced to ERROR and removed.

A session that stays in PREPARING, PULLING, CREATING or TERMINATING longer than
its state's limit (``BaiSessionManager.hang_timeout``) is moved to ERROR with
``hang-timeout`` (written first, as every transition), and its kernels and
networks are removed through its agents. An agent that does not answer (a hung
engine) is asked again at every check until it does. The state and the time it
was entered are in the store, so a manager that starts later (the reconciler
asks :meth:`HangWatch.overdue`) catches a hang that began before it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Protocol

from ...agents.base import AgentError
from ...errors import ConfigError
from ...model import IllegalTransition, Session, Status
from ..core import Core, move

__all__ = ["DEFAULT_HANG_TIMEOUTS", "HANG_STATES", "HangWatch", "hang_limits"]

#: The states a session may hang in: its kernels are being made or removed.
HANG_STATES = (Status.PREPARING, Status.PULLING, Status.CREATING, Status.TERMINATING)
#: Seconds per state when not configured: above the default start_timeout (120 s),
#: which ends slow starts first, with failed-to-start.
DEFAULT_HANG_TIMEOUTS = {
    "PREPARING": 300.0,
    "PULLING": 1800.0,
    "CREATING": 300.0,
    "TERMINATING": 300.0,
}
#: The status_info of a session forced out of a hang.
HANG_TIMEOUT = "hang-timeout"


def hang_limits(config: Mapping[str, Any]) -> dict[Status, float]:
    """``{state: seconds}`` over the defaults; 0 turns a state's limit off."""
    names = [s.value for s in HANG_STATES]
    limits = dict(DEFAULT_HANG_TIMEOUTS)
    for name, value in config.items():
        if name not in names:
            raise ConfigError(
                f"hang_timeout: no state {name!r} to time out (states: {', '.join(names)})"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"hang_timeout.{name}: must be seconds >= 0 (0: no limit)")
        limits[name] = float(value)
    return {Status(name): seconds for name, seconds in limits.items() if seconds > 0}


class _Settings(Protocol):
    @property
    def watchdog_interval(self) -> float: ...

    @property
    def hang_timeout(self) -> Mapping[str, Any]: ...


class HangWatch:
    """Finds sessions past their state's limit, fails them, and removes their kernels."""

    def __init__(self, core: Core, settings: _Settings) -> None:
        self.core = core
        self.settings = settings
        #: Sessions forced out whose kernels are not removed yet (retried every check).
        self._unremoved: set[str] = set()
        self._removing: set[str] = set()

    @property
    def limits(self) -> dict[Status, float]:
        """Seconds per state, as configured now (a change applies at the next check)."""
        return hang_limits(self.settings.hang_timeout)

    def overdue(self, session: Session, now: float | None = None) -> bool:
        """Whether the session has been in a hang state longer than that state's limit."""
        limit = self.limits.get(session.status)
        if limit is None or not session.status_history:
            return False
        since = session.status_history[-1].at
        return (time.time() if now is None else now) - since > limit

    async def loop(self) -> None:
        """Check every ``watchdog_interval`` seconds."""
        interval = lambda: self.settings.watchdog_interval  # noqa: E731
        await self.core.every(interval, self.check, "the hang check", minimum=0.05).run()

    async def check(self) -> None:
        """Force every overdue session out; ask again to remove what is still there."""
        now = time.time()
        limits = self.limits
        for session in await self.core.list_sessions(statuses=list(limits)):
            if self.overdue(session, now):
                await self.force(session)
        for session_id in self._unremoved - self._removing:
            self._removing.add(session_id)
            self.core.spawn(self._remove(session_id))

    async def force(self, seen: Session) -> None:
        """ERROR with ``hang-timeout`` (unless it moved on meanwhile), then remove it."""
        state = seen.status

        limit = self.limits[state]

        def failing(s: Session) -> None:
            if s.status is not state or len(s.status_history) != len(seen.status_history):
                raise IllegalTransition(f"session {s.id}", s.status, Status.ERROR)
            since = s.status_history[-1].at
            move(s, Status.ERROR, time.time(), HANG_TIMEOUT)
            hang = {"state": state.value, "since": since, "limit": limit}
            s.status_data = {**s.status_data, "hang": hang}

        try:
            await self.core.edit(seen.id, failing)
        except IllegalTransition:
            return  # it moved on after all
        self.core.log.warning(
            "bai-jupyter: session %s hung in %s for more than %g s: ERROR (%s)",
            seen.id,
            state.value,
            limit,
            HANG_TIMEOUT,
        )
        self._unremoved.add(seen.id)
        self._removing.add(seen.id)
        self.core.spawn(self._remove(seen.id))
        self.core.wake()  # its slots are free

    async def _remove(self, session_id: str) -> None:
        """Remove the session's kernels and networks on every agent it was placed on."""
        try:
            session = await self.core.get(session_id)
            for agent_id in {k.agent_id for k in session.kernels if k.agent_id}:
                agent = self.core.agents.get(agent_id)
                if agent is None:
                    continue  # not connected: the next manager's reconcile removes them
                # A hung engine may not answer; never wait longer than a check's interval
                # times a few (the thread it blocks is the engine client's to time out).
                timeout = max(10.0, 4 * self.settings.watchdog_interval)
                await asyncio.wait_for(agent.destroy_session(session_id), timeout)
        except (AgentError, asyncio.TimeoutError, OSError) as exc:
            self.core.log.warning(
                "bai-jupyter: removing hung session %s: %s; trying again", session_id, exc
            )
        else:
            self._unremoved.discard(session_id)
            self.core.log.info("bai-jupyter: removed the kernels of hung session %s", session_id)
        finally:
            self._removing.discard(session_id)
