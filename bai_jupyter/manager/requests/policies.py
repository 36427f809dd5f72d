"""Per-user and per-group policies (``BaiSessionManager.policies``) resolved for one owner.

``{"default": {...}, "groups": {"students": {...}}, "users": {"alice": {...}}}``,
each entry naming only the limits it sets. For each limit: the user's own entry,
else the most generous entry among the groups they are in, else ``default``,
else no limit. What is refused at create (a resource group or image not
allowed, too many pending) says which entry refused it; what keeps a session
pending (concurrency, resources held) says so in its why-pending record. The idle
rules (``idle_timeout``, ``session_lifetime``, ``utilization``; see
:mod:`bai_jupyter.idleness`) resolve the same way, the most generous being off (0).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError
from ...idleness import parse_seconds, parse_utilization, widest_seconds, widest_utilization
from ...resources import ResourceError, ResourceSlot
from ...scheduler.config import OwnerPolicy
from ..owners import exempt

__all__ = ["POLICY_KEYS", "OwnerLimits", "Policies"]


#: Where a ``max_pending`` no policies entry sets comes from.
_DEFAULT_PENDING = "BaiSessionManager.default_max_pending"


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}: must be a whole number >= 0, got {value!r}")
    return value


def _slots(value: Any, where: str) -> ResourceSlot:
    try:
        return ResourceSlot(value)
    except (ResourceError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: must be a list of names (or patterns), got {value!r}")
    return tuple(value)


def _widest_count(values: Sequence[int]) -> int:
    return max(values)


def _widest_slots(values: Sequence[ResourceSlot]) -> ResourceSlot:
    slots = {s for v in values for s in v}
    # A slot a group entry leaves out is not limited by it: so neither by the widest.
    return ResourceSlot(
        {s: max(v[s] for v in values) for s in slots if all(s in v for v in values)}
    )


def _widest_names(values: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for v in values for name in v))


def _checked(parse: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """An idle rule's parser, its ValueError as the ConfigError a bad policy is."""

    def parser(value: Any, where: str) -> Any:
        try:
            return parse(value, where)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    return parser


#: Each limit: how to parse it, and the most generous of several.
POLICY_KEYS: dict[str, tuple[Callable[[Any, str], Any], Callable[[Sequence[Any]], Any]]] = {
    "max_concurrent_sessions": (_count, _widest_count),
    "max_resources": (_slots, _widest_slots),
    "max_pending": (_count, _widest_count),
    "allowed_resource_groups": (_names, _widest_names),
    "allowed_images": (_names, _widest_names),
    "idle_timeout": (_checked(parse_seconds), widest_seconds),
    "session_lifetime": (_checked(parse_seconds), widest_seconds),
    "utilization": (_checked(parse_utilization), widest_utilization),
}


@dataclass(frozen=True)
class OwnerLimits:
    """One owner's limits, each with the entry it came from (``policies.users.alice``)."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def scheduler_policy(self, fallback: OwnerPolicy) -> OwnerPolicy:
        """The scheduler's per-owner limits: these, else the resource group's own."""
        names = ("max_concurrent_sessions", "max_resources")
        if not any(name in self.values for name in names):
            return fallback
        sources = sorted({self.sources[n] for n in names if n in self.sources})
        return OwnerPolicy(
            max_concurrent_sessions=self.values.get(
                "max_concurrent_sessions", fallback.max_concurrent_sessions
            ),
            max_resources=self.values.get("max_resources", fallback.max_resources),
            source=" and ".join(sources),
        )

    def refuse(self, image: str, resource_group: str, pending: int) -> str | None:
        """Why a new session of this owner is refused at create, or None."""
        allowed = self.values.get("allowed_resource_groups")
        if allowed is not None and resource_group not in allowed:
            return (
                f"{self.sources['allowed_resource_groups']}.allowed_resource_groups: resource "
                f"group {resource_group!r} is not allowed (allowed: {', '.join(allowed) or 'none'})"
            )
        images = self.values.get("allowed_images")
        if images is not None and not any(fnmatch.fnmatchcase(image, p) for p in images):
            return (
                f"{self.sources['allowed_images']}.allowed_images: image {image!r} is not "
                f"allowed (allowed: {', '.join(images) or 'none'})"
            )
        most = self.values.get("max_pending")
        if most is not None and pending >= most:
            source = self.sources["max_pending"]
            where = source if source == _DEFAULT_PENDING else f"{source}.max_pending"
            return (
                f"{where}: {pending} sessions are pending already, the most allowed is "
                f"{most}; wait, or cancel one"
            )
        return None


class Policies:
    """The configured policies, checked once; resolves any owner's limits."""

    def __init__(
        self, config: Mapping[str, Any] | None = None, default_max_pending: int | None = None
    ) -> None:
        """``default_max_pending``: ``max_pending`` where no entry sets it (None: none)."""
        self.default_max_pending: int | None = None
        self.default: dict[str, Any] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.load(config or {}, default_max_pending)

    def load(self, config: Mapping[str, Any], default_max_pending: int | None = None) -> None:
        """Check ``config`` (the ``policies`` setting) and use it from now on (the manager
        loads its setting when it starts); a bad one raises ConfigError and changes nothing."""
        unknown = set(config) - {"default", "groups", "users"}
        if unknown:
            raise ConfigError(
                f"policies: unknown section {sorted(unknown)[0]!r} (use default, groups, users)"
            )
        default = self._entry(config.get("default") or {}, "policies.default")
        groups = self._section(config.get("groups") or {}, "policies.groups")
        users = self._section(config.get("users") or {}, "policies.users")
        self.default, self.groups, self.users = default, groups, users
        self.default_max_pending = default_max_pending

    def key(self) -> str:
        """The loaded policies as text: an idle scheduling pass is skipped only under the
        same ones (another manager on the store may have loaded others)."""
        return repr((self.default, self.groups, self.users))

    def _section(self, section: Any, where: str) -> dict[str, dict[str, Any]]:
        if not isinstance(section, Mapping):
            raise ConfigError(f"{where}: must map names to entries, got {section!r}")
        return {str(name): self._entry(entry, f"{where}.{name}") for name, entry in section.items()}

    @staticmethod
    def _entry(entry: Any, where: str) -> dict[str, Any]:
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: must be a mapping of limits, got {entry!r}")
        unknown = set(entry) - set(POLICY_KEYS)
        if unknown:
            raise ConfigError(
                f"{where}: unknown limit {sorted(unknown)[0]!r} (limits: {', '.join(POLICY_KEYS)})"
            )
        return {key: POLICY_KEYS[key][0](value, f"{where}.{key}") for key, value in entry.items()}

    def for_owner(self, owner: str, groups: Iterable[str]) -> OwnerLimits:
        """``owner``'s limits: their own entry, else their groups', else the default (the
        manager's own owners have none: see :func:`~..owners.exempt`)."""
        if exempt(owner):
            return OwnerLimits()
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        own = self.users.get(owner, {})
        mine = [(g, self.groups[g]) for g in sorted(set(groups)) if g in self.groups]
        for key, (_, widest) in POLICY_KEYS.items():
            if key in own:
                values[key], sources[key] = own[key], f"policies.users.{owner}"
                continue
            given = [(g, entry[key]) for g, entry in mine if key in entry]
            if given:
                values[key] = widest([value for _, value in given])
                sources[key] = "policies.groups." + ",".join(g for g, _ in given)
            elif key in self.default:
                values[key], sources[key] = self.default[key], "policies.default"
        if "max_pending" not in values and self.default_max_pending is not None:
            values["max_pending"] = self.default_max_pending
            sources["max_pending"] = _DEFAULT_PENDING
        return OwnerLimits(values, sources)

    def scheduler_policy(
        self, owner: str, groups: Sequence[str], fallback: OwnerPolicy
    ) -> OwnerPolicy:
        """The scheduler's limits for ``owner``: the policies', else the group's own
        (``fallback``); none for the manager's own owners (the warm pools' sizes bound them)."""
        if exempt(owner):
            return OwnerPolicy()
        return self.for_owner(owner, groups).scheduler_policy(fallback)
