"""Resource slots: exact amounts of `cpu`, `mem` and `cuda.device`.

Amounts are :class:`~decimal.Decimal` so that ``0.1 + 0.2`` cpus is exactly
``0.3`` and no scheduling decision depends on float rounding.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import TypeAlias

Amount: TypeAlias = "str | int | float | Decimal"


class SlotKind(Enum):
    """How a slot's amounts are written and shown."""

    COUNT = "count"  # cpus, devices: plain decimal numbers
    BYTES = "bytes"  # memory: whole bytes, binary units accepted


#: Every slot the scheduler knows, in the order used for display and placement keys.
KNOWN_SLOTS: dict[str, SlotKind] = {
    "cpu": SlotKind.COUNT,
    "mem": SlotKind.BYTES,
    "cuda.device": SlotKind.COUNT,
}

#: Slots that name a device; an agent that has one a session does not need is avoided.
DEVICE_SLOTS = frozenset({"cuda.device"})

_UNITS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}
_SIZE_RE = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+))\s*([a-z]?)(i?b?)\s*$", re.IGNORECASE)


class ResourceError(ValueError):
    """A malformed, negative or unknown resource amount; the message names the slot.

    ``field``: the request field's dotted path (``resources.cpu``) where one is known."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def parse_amount(slot: str, value: Amount) -> Decimal:
    """Parse one slot's amount (``"2"``, ``"0.5"``, ``"512m"``, ``"1.5GiB"``) exactly."""
    kind = KNOWN_SLOTS.get(slot)
    if kind is None:
        raise ResourceError(
            f"unknown resource slot {slot!r} (known slots: {', '.join(KNOWN_SLOTS)})"
        )
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise ResourceError(f"{slot}: expected a number or a string, got {value!r}")
    # Numbers are written out in full: str(Decimal("2E+9")) and str(1e20) use exponents.
    text = value.strip() if isinstance(value, str) else f"{Decimal(str(value)):f}"
    match = _SIZE_RE.match(text)
    if match is None:
        raise ResourceError(f"{slot}: cannot parse {value!r} as an amount")
    number, unit, suffix = match.group(1), match.group(2).lower(), match.group(3).lower()
    if unit == "b" and not suffix:  # "512b": plain bytes
        unit, suffix = "", "b"
    if kind is SlotKind.COUNT and (unit or suffix):
        raise ResourceError(f"{slot}: {value!r} has a unit, but {slot} is a plain count")
    if unit not in _UNITS:
        raise ResourceError(
            f"{slot}: unknown unit {match.group(2)!r} in {value!r} "
            "(use k, m, g, t, p or e, optionally followed by 'i'/'b', e.g. '512m', '1.5GiB')"
        )
    try:
        amount = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise ResourceError(f"{slot}: cannot parse {value!r}") from exc
    if amount < 0:
        raise ResourceError(f"{slot}: amount must not be negative, got {value!r}")
    if kind is SlotKind.BYTES:
        # Binary units, as Backend.AI does; a fraction of a byte is dropped.
        amount = Decimal(int(amount * (1024 ** _UNITS[unit])))
    return amount.normalize() if amount else Decimal(0)


def format_amount(slot: str, amount: Decimal) -> str:
    """Show an amount the way a user would write it: ``4g``, ``512m``, ``0.5``."""
    if KNOWN_SLOTS.get(slot) is SlotKind.BYTES and amount:
        for unit, power in sorted(_UNITS.items(), key=lambda item: -item[1]):
            scaled = amount / (1024**power)
            if power and scaled >= 1 and scaled == scaled.quantize(Decimal("0.01")):
                return f"{scaled.normalize():f}{unit}"
    return f"{amount.normalize():f}"


def human_amount(slot: str, amount: Decimal) -> str:
    """An amount as a person reads it, not as one writes it: ``10.8 GiB`` for
    ``11314740k`` (three significant digits in the largest binary unit it reaches),
    ``0.5`` for a count. For what the system has, where :func:`format_amount` would
    keep every byte."""
    if KNOWN_SLOTS.get(slot) is not SlotKind.BYTES or not amount:
        return f"{amount.normalize():f}"
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    power = 0
    while power < len(units) - 1 and amount >= 1024 ** (power + 1):
        power += 1
    scaled = amount / (1024**power)
    digits = Decimal(1) if scaled >= 100 or not power else Decimal("0.1")
    return f"{scaled.quantize(digits).normalize():f} {units[power]}"


class ResourceSlot(Mapping[str, Decimal]):
    """An immutable mapping slot → amount; a missing slot counts as zero.

    Zero amounts are not stored, so equal resources compare and hash equal
    however they were written.
    """

    __slots__ = ("_amounts", "_hash")

    def __init__(self, amounts: Mapping[str, Amount] | None = None) -> None:
        parsed = {slot: parse_amount(slot, value) for slot, value in (amounts or {}).items()}
        self._amounts: dict[str, Decimal] = {
            slot: parsed[slot] for slot in KNOWN_SLOTS if parsed.get(slot)
        }
        self._hash: int | None = None

    @classmethod
    def _exact(cls, amounts: dict[str, Decimal]) -> ResourceSlot:
        """Build from already-parsed amounts (internal fast path)."""
        slot = cls.__new__(cls)
        slot._amounts = {name: amounts[name] for name in KNOWN_SLOTS if amounts.get(name)}
        slot._hash = None
        return slot

    # Mapping protocol
    def __getitem__(self, slot: str) -> Decimal:
        return self._amounts[slot]

    def __iter__(self) -> Iterator[str]:
        return iter(self._amounts)

    def __len__(self) -> int:
        return len(self._amounts)

    def updated(self, other: Mapping[str, Decimal]) -> ResourceSlot:
        """These amounts with ``other``'s in their place where it names a slot."""
        return ResourceSlot._exact({**self._amounts, **other})

    def get_amount(self, slot: str) -> Decimal:
        """The amount of ``slot``; zero when absent."""
        return self._amounts.get(slot, Decimal(0))

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._amounts.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ResourceSlot):
            return self._amounts == other._amounts
        return NotImplemented

    # Arithmetic
    def __add__(self, other: ResourceSlot) -> ResourceSlot:
        merged = dict(self._amounts)
        for slot, amount in other._amounts.items():
            merged[slot] = merged.get(slot, Decimal(0)) + amount
        return ResourceSlot._exact(merged)

    def __sub__(self, other: ResourceSlot) -> ResourceSlot:
        """Subtract; a result below zero is a bug (over-release) and raises."""
        merged = dict(self._amounts)
        for slot, amount in other._amounts.items():
            left = merged.get(slot, Decimal(0)) - amount
            if left < 0:
                raise ResourceError(
                    f"{slot}: cannot take {format_amount(slot, amount)} from "
                    f"{format_amount(slot, merged.get(slot, Decimal(0)))}"
                )
            merged[slot] = left
        return ResourceSlot._exact(merged)

    def __mul__(self, factor: int) -> ResourceSlot:
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 0:
            raise ResourceError(f"can only multiply resources by a count, got {factor!r}")
        return ResourceSlot._exact({slot: amount * factor for slot, amount in self.items()})

    __rmul__ = __mul__

    def fits_in(self, free: ResourceSlot) -> bool:
        """True when every requested slot is at most what ``free`` has."""
        have = free._amounts
        return all(amount <= have.get(slot, 0) for slot, amount in self._amounts.items())

    def shortfall(self, free: ResourceSlot) -> dict[str, tuple[Decimal, Decimal]]:
        """Slots where ``self`` exceeds ``free``: slot → (needed, available)."""
        return {
            slot: (amount, free.get_amount(slot))
            for slot, amount in self._amounts.items()
            if amount > free.get_amount(slot)
        }

    def to_json(self) -> dict[str, str]:
        """Exact, JSON-safe form (strings keep every digit)."""
        return {slot: f"{amount:f}" for slot, amount in self._amounts.items()}

    def describe(self) -> str:
        """Human form, e.g. ``cpu=2 mem=4g``."""
        if not self._amounts:
            return "nothing"
        return " ".join(f"{slot}={format_amount(slot, a)}" for slot, a in self._amounts.items())

    def __repr__(self) -> str:
        return f"ResourceSlot({self.to_json()!r})"


ZERO = ResourceSlot()


def total(slots: Iterator[ResourceSlot] | list[ResourceSlot]) -> ResourceSlot:
    """Sum of many resource slots."""
    merged: dict[str, Decimal] = {}
    for slot in slots:
        for name, amount in slot.items():
            merged[name] = merged.get(name, Decimal(0)) + amount
    return ResourceSlot._exact(merged)
