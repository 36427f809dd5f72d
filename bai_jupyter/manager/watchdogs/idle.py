"""The idle watch: running sessions ended by their idle rules, and the time each has left.

Every ``watchdog_interval`` seconds it looks at each running session: which rules
apply (:class:`IdleSettings`: the owner's policies, else the resource group's
``idle``), when the session was last used (:mod:`.activity`), how much CPU it
used (:mod:`.utilization`), and when each rule fires. The deadlines go to the
store (``status_data["idle"]``, rewritten only when one moved by more than the
interval, so the API shows the time left without a write per look); a session
past one is terminated with that rule's status_info.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from decimal import Decimal
from functools import partial
from typing import Any, Protocol

from ...agents.base import AgentError
from ...idleness import IDLE_TIMEOUT, REASONS, SESSION_LIFETIME, UTILIZATION, IdleRules
from ...model import ACTIVE, OCCUPYING, IllegalTransition, Session, SessionType, Status
from ...store import Transaction
from ..core import Core
from ..lifecycle.sftp import open_connections
from ..lifecycle.start_stop import Lifecycle
from ..pools.config import MARK
from .activity import Activity
from .idle_rules import IdleSettings
from .utilization import CpuWindows

__all__ = ["IdleWatch"]


class _Settings(Protocol):
    @property
    def watchdog_interval(self) -> float: ...


def _started_at(session: Session) -> float:
    """When the session first ran (its lifetime counts from there), or was claimed from a
    warm pool (then its user's time began)."""
    claimed = (session.status_data.get(MARK) or {}).get("claimed_at")
    if isinstance(claimed, (int, float)):
        return float(claimed)
    return next(
        (h.at for h in session.status_history if h.status is Status.RUNNING), session.created_at
    )


def _cores(session: Session) -> float:
    """The CPU slots of all its kernels (with roles, each kernel's own)."""
    return float(sum((k.slots.get("cpu") or Decimal(0) for k in session.kernels), Decimal(0)))


class IdleWatch:
    """Applies the idle rules to running sessions and records the time each has left."""

    def __init__(
        self,
        core: Core,
        settings: _Settings,
        lifecycle: Lifecycle,
        activity: Activity,
        idle_settings: IdleSettings,
    ) -> None:
        self.core = core
        self.settings = settings
        self.lifecycle = lifecycle
        self.activity = activity
        #: The idle settings in force now (they change when the config is reloaded).
        self.idle_settings = idle_settings
        self.cpu = CpuWindows()
        self._ending: set[str] = set()
        #: When each system session's SFTP connections were last counted (monotonic).
        self._probed: dict[str, float] = {}
        #: The uses other processes on the store noted, as read by the last check.
        self._noted: dict[str, tuple[float, str]] = {}

    async def loop(self) -> None:
        """Check every ``watchdog_interval`` seconds."""
        interval = lambda: self.settings.watchdog_interval  # noqa: E731
        await self.core.every(interval, self.check, "the idle check", minimum=0.05).run()

    async def check(self) -> None:
        """One look at every running session."""
        settings = self.idle_settings
        if not settings.configured:
            return
        listed_at = time.time()
        # Not only the running ones: the lifecycle follows a kernel before RUNNING, and
        # a session still starting when the list is read keeps its follower.
        present = await self.core.list_sessions(statuses=OCCUPYING)
        sessions = [s for s in present if s.status in ACTIVE]
        owners = {s.owner for s in sessions}
        groups = await self.core.query(lambda tx: tx.owner_groups(owners)) if owners else {}
        live = {s.id for s in sessions}
        self._noted = await self.core.query(partial(Transaction.activity_of, session_ids=live))
        self.activity.prune({s.id for s in present}, listed_at)
        self.cpu.prune(live)
        self._probed = {k: v for k, v in self._probed.items() if k in live}
        await asyncio.gather(
            *(self._session(s, settings.rules_for(s, groups.get(s.owner, []))) for s in sessions)
        )

    async def _session(self, session: Session, rules: IdleRules) -> None:
        if not rules or session.id in self._ending:
            return
        # What takes time first (the agents' answers); then decide on what is known now,
        # so that activity noted meanwhile counts.
        probed = await self._watch_use(session, rules)
        util = await self._utilization(session, rules) if rules.utilization else None
        deadlines, last, source = self._deadlines(session, rules, util)
        due = sorted((entry["deadline"], name) for name, entry in deadlines.items())
        idle_now = bool(due) and due[0][1] == IDLE_TIMEOUT and due[0][0] <= time.time()
        if idle_now and not probed and session.spec.type is SessionType.SYSTEM:
            # One last count before ending it: a connection opened since the last one is
            # use (counts are up to 10 s apart), then the deadlines again.
            self._probed[session.id] = time.monotonic()
            await self._probe_sftp(session)
            deadlines, last, source = self._deadlines(session, rules, util)
            due = sorted((entry["deadline"], name) for name, entry in deadlines.items())
        if due and due[0][0] <= time.time():
            self._ending.add(session.id)
            self.core.spawn(self._end(session.id, REASONS[due[0][1]]))
        await self._record(session, deadlines, last, source)

    def _deadlines(
        self, session: Session, rules: IdleRules, util: dict[str, Any] | None
    ) -> tuple[dict[str, dict[str, Any]], float, str]:
        """Each rule's deadline (with its timeout and source), and the last use seen."""
        last, source = self._last_activity(session)
        deadlines: dict[str, dict[str, Any]] = {}
        if rules.idle_timeout:
            deadlines[IDLE_TIMEOUT] = {
                "timeout": rules.idle_timeout,
                "deadline": last + rules.idle_timeout,
            }
        if rules.session_lifetime:
            deadlines[SESSION_LIFETIME] = {
                "timeout": rules.session_lifetime,
                "deadline": _started_at(session) + rules.session_lifetime,
            }
        if util is not None:
            deadlines[UTILIZATION] = util
        for name, entry in deadlines.items():
            entry["source"] = rules.sources.get(name)
        return deadlines, last, source

    async def _watch_use(self, session: Session, rules: IdleRules) -> bool:
        """Follow main1's kernel (interactive), probe open SFTP connections (system): at
        most every quarter of the idle timeout (10 s at most), not at every check, and
        once more before the idle timeout ends it. Whether it probed now."""
        if not rules.idle_timeout:
            return False
        if session.spec.type is SessionType.INTERACTIVE:
            self.activity.follow_kernel(session)
        elif session.spec.type is SessionType.SYSTEM:
            every = max(self.settings.watchdog_interval, min(10.0, rules.idle_timeout / 4))
            now = time.monotonic()
            if now - self._probed.get(session.id, -every) >= every:
                self._probed[session.id] = now
                await self._probe_sftp(session)
                return True
        return False

    def _last_activity(self, session: Session) -> tuple[float, str]:
        """The latest of what this process saw, what others noted, the idle record, the
        start."""
        record = session.status_data.get("idle") or {}
        candidates = [(_started_at(session), "start")]
        if record.get("last_activity") is not None:
            candidates.append((float(record["last_activity"]), str(record.get("activity"))))
        for seen in (self.activity.last(session.id), self._noted.get(session.id)):
            if seen is not None:
                candidates.append(seen)
        return max(candidates)

    async def _probe_sftp(self, session: Session) -> None:
        """An open SFTP connection is activity (asked of main1: the agent's exec)."""
        main = session.main
        agent = self.core.agents.get(main.agent_id or "")
        if agent is None:
            return
        with contextlib.suppress(AgentError):
            if await open_connections(agent, main.id):
                self.activity.touch(session.id, "sftp")

    async def _utilization(self, session: Session, rules: IdleRules) -> dict[str, Any] | None:
        """Sample the session's CPU time; its rule's deadline (None: not measurable)."""
        util = rules.utilization
        assert util is not None
        used = 0.0
        for agent_id in {k.agent_id for k in session.kernels if k.agent_id}:
            agent = self.core.agents.get(agent_id)
            if agent is None:
                return None
            try:
                seconds = await agent.cpu_seconds(session.id)
            except AgentError:
                return None
            if seconds is None:
                return None
            used += seconds
        keep = util.window + 2 * self.settings.watchdog_interval
        self.cpu.add(session.id, time.time(), used, keep)
        verdict = self.cpu.verdict(session.id, _cores(session), util.cpu_percent, util.window)
        return {
            **util.to_json(),
            "deadline": verdict.deadline,
            "cpu_used": verdict.cpu_percent,
        }

    async def _record(
        self, session: Session, rules: dict[str, dict[str, Any]], last: float, source: str
    ) -> None:
        """Write the deadlines when one appeared, went, or moved by more than the interval."""
        old = (session.status_data.get("idle") or {}).get("rules") or {}
        slack = max(self.settings.watchdog_interval, 0.5)
        same = set(old) == set(rules) and all(
            abs(float(old[n].get("deadline") or 0) - rules[n]["deadline"]) <= slack for n in rules
        )
        if same:
            return
        record = {"last_activity": last, "activity": source, "rules": rules}

        def write(s: Session) -> None:
            if s.status in ACTIVE:
                s.status_data = {**s.status_data, "idle": record}

        with contextlib.suppress(KeyError):
            await self.core.edit(session.id, write)

    async def _end(self, session_id: str, reason: str) -> None:
        try:
            await self.lifecycle.destroy(session_id, reason=reason)
            self.core.log.info("bai-jupyter: session %s ended: %s", session_id, reason)
        except IllegalTransition:
            pass  # it ended on its own meanwhile
        finally:
            self._ending.discard(session_id)
            self.activity.forget(session_id)
            self.cpu.forget(session_id)
