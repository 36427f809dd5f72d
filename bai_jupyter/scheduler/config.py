"""Scheduler settings of one resource group, and how plugin options are parsed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..resources import ResourceError, ResourceSlot, format_amount

OptionParser = Callable[[Any], Any]


class SchedulerConfigError(ValueError):
    """A bad scheduler setting; the message names the option."""


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number")
    return float(value)


def non_negative_int(value: Any) -> int:
    """Option parser: an integer ≥ 0 (strings from the command line accepted)."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("expected a whole number")
    number = int(value)
    if number < 0:
        raise ValueError("must not be negative")
    return number


def positive_seconds(value: Any) -> float:
    """Option parser: a duration in seconds > 0."""
    number = _number(value)
    if not number > 0:
        raise ValueError("must be a number of seconds > 0")
    return number


def fair_share_by(value: Any) -> str:
    """``users`` (each owner) or ``groups`` (each owner's group first, then owners in it)."""
    if value not in ("users", "groups"):
        raise SchedulerConfigError(f"must be 'users' or 'groups', got {value!r}")
    return str(value)


def resource_limit(value: Any) -> ResourceSlot:
    """Option parser: a mapping ``{"cpu": "8"}`` or the text ``cpu=8,mem=16g``."""
    if isinstance(value, str):
        pairs = [part.split("=", 1) for part in value.split(",") if part.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError("expected slot=amount pairs such as cpu=8,mem=16g")
        value = {k.strip(): v.strip() for k, v in pairs}
    if not isinstance(value, Mapping):
        raise ValueError("expected a mapping of slot to amount")
    try:
        return ResourceSlot(value)
    except ResourceError as exc:
        raise ValueError(str(exc)) from exc


def parse_options(
    options: Mapping[str, Any], parsers: Mapping[str, OptionParser], owner: str
) -> dict[str, Any]:
    """Check and convert ``options`` with ``parsers``; unknown names are an error."""
    parsed: dict[str, Any] = {}
    for key, value in options.items():
        parser = parsers.get(key)
        if parser is None:
            known = ", ".join(sorted(parsers)) or "none"
            raise SchedulerConfigError(f"{owner}: unknown option {key!r} (known: {known})")
        try:
            parsed[key] = parser(value)
        except (TypeError, ValueError) as exc:
            raise SchedulerConfigError(f"{owner}: option {key}={value!r}: {exc}") from exc
    return parsed


@dataclass(frozen=True)
class OwnerPolicy:
    """Per-owner limits checked by the scheduler's predicates (None = unlimited)."""

    max_concurrent_sessions: int | None = None
    max_resources: ResourceSlot | None = None
    #: Where the limits come from, named in why-pending messages (e.g. ``policies.users.bob``).
    source: str = ""


#: Options every sequencer/selector combination understands (the predicates' settings).
COMMON_OPTIONS: dict[str, OptionParser] = {
    "pending_timeout": positive_seconds,
    "max_concurrent_sessions": non_negative_int,
    "max_resources": resource_limit,
    "default_resources": resource_limit,
    "min_resources": resource_limit,
}

#: What a kernel gets of each slot its request leaves out (every kernel holds real slots:
#: Docker reads a zero or absent limit as "unlimited").
DEFAULT_RESOURCES = ResourceSlot({"cpu": "0.5", "mem": "1g"})
#: The least of each slot a request may ask for.
MIN_RESOURCES = ResourceSlot({"cpu": "0.01", "mem": "64m"})
#: Docker refuses a memory limit below 6 MiB.
_DOCKER_MIN_MEM = ResourceSlot({"mem": "6m"})


@dataclass
class SchedulerConfig:
    """How one resource group schedules: which plugins, their options, the limits."""

    sequencer: str = "fifo"
    selector: str = "concentrated"
    #: Options for the sequencer and selector plugins (e.g. ``num_retries_to_skip``).
    options: dict[str, Any] = field(default_factory=dict)
    #: Cancel a session still pending after this many seconds (None = never).
    pending_timeout: float | None = None
    #: Limits for owners without an entry in ``owner_policies``.
    default_policy: OwnerPolicy = field(default_factory=OwnerPolicy)
    owner_policies: dict[str, OwnerPolicy] = field(default_factory=dict)
    #: Per kernel: fills each slot a request leaves out (cpu and mem always).
    default_resources: ResourceSlot = DEFAULT_RESOURCES
    #: Per kernel: the least a request may ask of each slot it names.
    min_resources: ResourceSlot = MIN_RESOURCES

    def __post_init__(self) -> None:
        missing = {"cpu", "mem"} - set(self.default_resources)
        if missing:
            raise SchedulerConfigError(
                f"default_resources must give {' and '.join(sorted(missing))}: "
                "a kernel without a limit would run uncapped"
            )
        if not (_DOCKER_MIN_MEM.fits_in(self.min_resources) and "cpu" in self.min_resources):
            raise SchedulerConfigError(
                "min_resources must give cpu > 0 and mem of at least 6m (Docker's floor)"
            )
        # Only the slots a default fills: a minimum binds only what a request names.
        if any(
            s in self.default_resources
            for s in self.min_resources.shortfall(self.default_resources)
        ):
            raise SchedulerConfigError(
                f"default_resources ({self.default_resources.describe()}) must be at least "
                f"min_resources ({self.min_resources.describe()})"
            )

    def policy(self, owner: str) -> OwnerPolicy:
        return self.owner_policies.get(owner, self.default_policy)

    def kernel_resources(self, requested: ResourceSlot) -> ResourceSlot:
        """A kernel's slots: ``requested`` with the defaults filled in; ResourceError when
        a requested amount is below ``min_resources``."""
        for slot, least in self.min_resources.items():
            amount = requested.get(slot)
            if amount is not None and amount < least:
                raise ResourceError(
                    f"resources.{slot}: {format_amount(slot, amount)} is below the minimum "
                    f"{format_amount(slot, least)} of this resource group",
                    field=f"resources.{slot}",
                )
        filled = dict(requested)
        for slot, amount in self.default_resources.items():
            filled.setdefault(slot, amount)
        return ResourceSlot(filled)

    @classmethod
    def from_group(cls, settings: Mapping[str, Any]) -> SchedulerConfig:
        """A resource group's settings as configured: ``{sequencer, selector, options}``."""
        return cls.from_options(
            settings.get("sequencer", "fifo"),
            settings.get("selector", "concentrated"),
            dict(settings.get("options") or {}),
        )

    @classmethod
    def from_options(
        cls, sequencer: str, selector: str, options: Mapping[str, Any] | None = None
    ) -> SchedulerConfig:
        """Split flat options into the common limits and the plugins' own options."""
        options = dict(options or {})
        common = parse_options(
            {k: options.pop(k) for k in list(options) if k in COMMON_OPTIONS},
            COMMON_OPTIONS,
            "scheduler",
        )
        return cls(
            sequencer=sequencer,
            selector=selector,
            options=options,
            pending_timeout=common.get("pending_timeout"),
            default_policy=OwnerPolicy(
                max_concurrent_sessions=common.get("max_concurrent_sessions"),
                max_resources=common.get("max_resources"),
            ),
            # Each names only the slots it changes; the built-in amounts keep the others.
            default_resources=_over(DEFAULT_RESOURCES, common.get("default_resources")),
            min_resources=_over(MIN_RESOURCES, common.get("min_resources")),
        )


def _over(base: ResourceSlot, changes: ResourceSlot | None) -> ResourceSlot:
    return base if changes is None else ResourceSlot({**base, **changes})
