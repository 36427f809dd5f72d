"""Which idle rules apply to a session, and following a kernel before its user has it.

:class:`IdleSettings` resolves the rules of one session (the owner's policies,
else the resource group's ``idle``); :class:`IdleFollow` follows an interactive
session's kernel from before it is announced RUNNING, or handed over from a warm
pool, so a cell its user runs at once counts as use. The idle watch itself
(:mod:`.idle`) applies the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ...idleness import IDLE_TIMEOUT, SESSION_LIFETIME, UTILIZATION, IdleRules, parse_idle_settings
from ...model import Session, SessionType
from ..core import Core
from ..owners import exempt
from ..requests.policies import Policies
from .activity import Activity

__all__ = ["IdleFollow", "IdleSettings"]


class IdleSettings:
    """Which idle rules apply to an owner's session in a resource group."""

    def __init__(self, groups: Mapping[str, Mapping[str, Any]], policies: Policies) -> None:
        self.policies = policies
        self.groups: dict[str, dict[str, Any]] = {}
        self.load(groups)

    def load(self, groups: Mapping[str, Mapping[str, Any]]) -> None:
        """Check each resource group's ``idle`` and use them from now on (the manager
        loads its setting when it starts); a bad one raises ConfigError and changes nothing."""
        parsed: dict[str, dict[str, Any]] = {}
        for name, conf in groups.items():
            try:
                parsed[name] = parse_idle_settings(
                    conf.get("idle") or {}, f"resource_groups.{name}.idle"
                )
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        self.groups = parsed

    @property
    def configured(self) -> bool:
        """Whether any rule is set anywhere (else the watch has nothing to look at)."""
        policies = [self.policies.default, *self.policies.groups.values()]
        policies += list(self.policies.users.values())
        keys = (IDLE_TIMEOUT, SESSION_LIFETIME, UTILIZATION)
        return any(self.groups.values()) or any(k in entry for entry in policies for k in keys)

    def rules_for(self, session: Session, owner_groups: list[str]) -> IdleRules:
        """The owner's policy for each rule, else the group's; what the type is exempt
        from left out (and every rule for the manager's own owners: a warm session waits
        for its user by design)."""
        if exempt(session.owner):
            return IdleRules()
        limits = self.policies.for_owner(session.owner, owner_groups)
        group = session.spec.resource_group
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for key, value in self.groups.get(group, {}).items():
            values[key], sources[key] = value, f"resource_groups.{group}.idle"
        for key in (IDLE_TIMEOUT, SESSION_LIFETIME, UTILIZATION):
            if key in limits.values:
                values[key], sources[key] = limits.values[key], limits.sources[key]
        return IdleRules.from_values(values, sources).for_type(session.spec.type)


class IdleFollow:
    """Follows a session's kernel from before its user has it, where an idle_timeout
    applies (the lifecycle calls it before RUNNING, a warm pool's claim after a hand-over)."""

    def __init__(self, core: Core, activity: Activity, settings: IdleSettings) -> None:
        self.core = core
        self.activity = activity
        self.settings = settings

    async def before_running(self, session: Session) -> None:
        """Follow an interactive session's kernel before it is announced RUNNING, when an
        idle_timeout applies: a cell its user runs at once keeps it in use."""
        settings = self.settings
        if not settings.configured or session.spec.type is not SessionType.INTERACTIVE:
            return
        groups = await self.core.query(lambda tx: tx.owner_groups({session.owner}))
        if settings.rules_for(session, groups.get(session.owner, [])).idle_timeout:
            await self.activity.follow_kernel_now(session)
