"""What the group held over time: the integrals behind utilization and dominant shares."""

from __future__ import annotations

from decimal import Decimal

from ...resources import ResourceSlot
from ..shares import dominant_share


class Usage:
    """Occupied slots and owners' dominant shares, integrated over simulated time.

    Each integral is brought up to date lazily, at each change of what it
    integrates, so a run costs O(changes) and not O(instants × owners).
    """

    def __init__(self, capacity: ResourceSlot, start: float) -> None:
        self.capacity = capacity
        #: Where the measured window starts (the first submit).
        self.start = start
        self.used: dict[str, Decimal] = {s: Decimal(0) for s in capacity}
        self.used_area: dict[str, float] = {s: 0.0 for s in capacity}
        self.used_since = start
        #: Per owner, in order of first appearance: slots held in the group now.
        self.held: dict[str, ResourceSlot] = {}
        self.share: dict[str, Decimal] = {}
        self.share_area: dict[str, float] = {}
        self.share_since: dict[str, float] = {}

    def add_owner(self, owner: str) -> None:
        """List ``owner`` from now on (with a share of 0 until it holds something)."""
        if owner not in self.held:
            self.held[owner] = ResourceSlot()
            self.share[owner] = Decimal(0)
            self.share_area[owner] = 0.0
            self.share_since[owner] = self.start

    def change(self, owner: str, slots: ResourceSlot, sign: int, now: float) -> None:
        """``owner`` takes (+1) or gives back (-1) ``slots`` at ``now``."""
        for slot, area in self.used_area.items():
            self.used_area[slot] = area + float(self.used[slot]) * (now - self.used_since)
        self.used_since = now
        for slot in self.used:
            self.used[slot] += sign * slots.get_amount(slot)
        held = self.held[owner]
        self.held[owner] = held + slots if sign > 0 else held - slots
        self.share_area[owner] += float(self.share[owner]) * (now - self.share_since[owner])
        self.share_since[owner] = now
        self.share[owner] = dominant_share(self.held[owner], self.capacity)

    def utilization(self, end: float) -> dict[str, float]:
        """Per slot: ∫ occupied dt / capacity over [start, end], not yet divided by its length."""
        return {
            slot: (self.used_area[slot] + float(self.used[slot]) * (end - self.used_since))
            / float(self.capacity[slot])
            for slot in self.capacity
        }

    def share_time(self, end: float) -> dict[str, float]:
        """Per owner: ∫ dominant share dt over [start, end], not yet divided by its length."""
        return {
            owner: area + float(self.share[owner]) * (end - self.share_since[owner])
            for owner, area in self.share_area.items()
        }
