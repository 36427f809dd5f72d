"""Idle rules: when a running session ends for want of use, and how long it has left.

Three rules, each off unless configured (docs/sessions.md, "Idle timeouts and limits"):

* ``idle_timeout``: no activity for T seconds (code run by main1's kernel, a command
  through the API, a proxied connection, an SFTP connection, an activity call);
* ``session_lifetime``: T seconds after the session started running, whatever it does;
* ``utilization``: its kernels used less than ``cpu_percent`` % of their CPU slots
  over the last ``window`` seconds.

A rule ends a session ``TERMINATED`` with its status_info (:data:`REASONS`). Batch
and inference sessions are exempt from idleness (not from the lifetime); system
(SFTP) sessions from the utilization rule. The settings come from a resource
group's ``idle`` setting and from the manager's policies; this module parses them
and reads the record the manager keeps in ``status_data["idle"]``. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .model import SessionType

__all__ = [
    "IDLE_KEYS",
    "IDLE_TIMEOUT",
    "REASONS",
    "SESSION_LIFETIME",
    "UTILIZATION",
    "IdleRules",
    "Utilization",
    "idle_view",
    "parse_idle_settings",
    "parse_seconds",
    "parse_utilization",
    "widest_seconds",
    "widest_utilization",
]

IDLE_TIMEOUT = "idle_timeout"
SESSION_LIFETIME = "session_lifetime"
UTILIZATION = "utilization"
#: The rules, in the order they are shown.
IDLE_KEYS = (IDLE_TIMEOUT, SESSION_LIFETIME, UTILIZATION)
#: The status_info of a session each rule ended.
REASONS = {
    IDLE_TIMEOUT: "idle-timeout",
    SESSION_LIFETIME: "session-lifetime",
    UTILIZATION: "utilization-idle",
}
#: The longest a rule's time may be (a year); 0 turns a rule off.
_MAX_SECONDS = 366 * 86400.0


@dataclass(frozen=True)
class Utilization:
    """End a session whose kernels used less than ``cpu_percent`` % of their CPU slots
    over the last ``window`` seconds (``cpu_percent`` 0: off)."""

    cpu_percent: float
    window: float

    def to_json(self) -> dict[str, float]:
        return {"cpu_percent": self.cpu_percent, "window": self.window}


def parse_seconds(value: Any, where: str) -> float:
    """Seconds from 0 (the rule is off) to a year; ValueError names ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: must be seconds (0: off), got {value!r}")
    seconds = float(value)
    if not (math.isfinite(seconds) and 0 <= seconds <= _MAX_SECONDS):
        raise ValueError(f"{where}: must be from 0 (off) to {_MAX_SECONDS:g} seconds")
    return seconds


def parse_utilization(value: Any, where: str) -> Utilization:
    """``{"cpu_percent": 5, "window": 600}``, or 0 (off)."""
    if value == 0 and not isinstance(value, bool):
        return Utilization(0.0, 0.0)
    if not isinstance(value, Mapping) or set(value) != {"cpu_percent", "window"}:
        raise ValueError(
            f"{where}: must be {{'cpu_percent': 0-100, 'window': seconds}} or 0 (off), "
            f"got {value!r}"
        )
    percent = value["cpu_percent"]
    if isinstance(percent, bool) or not isinstance(percent, (int, float)):
        raise ValueError(f"{where}.cpu_percent: must be a number from 0 to 100, got {percent!r}")
    if not 0 <= percent <= 100:
        raise ValueError(f"{where}.cpu_percent: must be from 0 (off) to 100, got {percent!r}")
    window = parse_seconds(value["window"], f"{where}.window")
    if percent > 0 and window <= 0:
        raise ValueError(f"{where}.window: must be more than 0 seconds")
    return Utilization(float(percent), window)


#: Each setting: its parser (value, where) → parsed.
_PARSERS = {
    IDLE_TIMEOUT: parse_seconds,
    SESSION_LIFETIME: parse_seconds,
    UTILIZATION: parse_utilization,
}


def parse_idle_settings(value: Any, where: str) -> dict[str, Any]:
    """A resource group's ``idle`` setting: any of the three keys; ValueError if bad."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be a mapping of {', '.join(IDLE_KEYS)}, got {value!r}")
    unknown = sorted(set(value) - set(IDLE_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(IDLE_KEYS)})")
    return {key: _PARSERS[key](v, f"{where}.{key}") for key, v in value.items()}


def widest_seconds(values: Sequence[float]) -> float:
    """The most generous of several limits: off (0) if any is off, else the longest."""
    return 0.0 if 0 in values else max(values)


def widest_utilization(values: Sequence[Utilization]) -> Utilization:
    """The most generous: off if any is off, else the lowest bar (then the longest window)."""
    if any(v.cpu_percent == 0 for v in values):
        return Utilization(0.0, 0.0)
    return min(values, key=lambda v: (v.cpu_percent, -v.window))


@dataclass(frozen=True)
class IdleRules:
    """The rules that apply to one session; ``None``: the rule is off. ``sources`` names
    the setting each came from (``resource_groups.gpu.idle``, ``policies.users.alice``)."""

    idle_timeout: float | None = None
    session_lifetime: float | None = None
    utilization: Utilization | None = None
    sources: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_values(cls, values: Mapping[str, Any], sources: Mapping[str, str]) -> IdleRules:
        """From parsed settings, a rule set to 0 (off) left out."""
        util = values.get(UTILIZATION)
        return cls(
            idle_timeout=values.get(IDLE_TIMEOUT) or None,
            session_lifetime=values.get(SESSION_LIFETIME) or None,
            utilization=util if util is not None and util.cpu_percent > 0 else None,
            sources=dict(sources),
        )

    def for_type(self, kind: SessionType) -> IdleRules:
        """What applies to a session of this type: batch and inference sessions are never
        idle (a job runs unattended; an endpoint's replicas wait for requests); a system
        (SFTP) session's CPU says nothing about its use."""
        idle = self.idle_timeout
        util = self.utilization
        if kind in (SessionType.BATCH, SessionType.INFERENCE):
            idle = util = None
        elif kind is SessionType.SYSTEM:
            util = None
        return IdleRules(idle, self.session_lifetime, util, self.sources)

    def __bool__(self) -> bool:
        return bool(self.idle_timeout or self.session_lifetime or self.utilization)


def idle_view(status_data: Mapping[str, Any], now: float, running: bool = True) -> dict[str, Any]:
    """The API's ``idle`` of a session: each rule that applies with the seconds ``left``
    before it fires if nothing happens from now on (from the manager's record); empty
    unless ``running`` (a session that ended has no time left to show)."""
    record = (status_data.get("idle") or {}) if running else {}
    view: dict[str, Any] = {}
    for name in IDLE_KEYS:
        rule = (record.get("rules") or {}).get(name)
        if not isinstance(rule, Mapping):
            continue
        deadline = rule.get("deadline")
        left = None if deadline is None else round(max(0.0, float(deadline) - now), 1)
        view[name] = {**{k: v for k, v in rule.items() if k != "deadline"}, "left": left}
    if view and record.get("last_activity") is not None:
        view["last_activity"] = record["last_activity"]
        view["activity"] = record.get("activity")
    return view
