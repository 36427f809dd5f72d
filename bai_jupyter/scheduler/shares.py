"""Dominant shares: how much of a resource group one owner holds, as DRF weighs it.

One function, so the DRF sequencer and the simulator's fair-share figures are
the same number by construction.
"""

from __future__ import annotations

from decimal import Decimal

from ..resources import ResourceSlot


def dominant_share(held: ResourceSlot, capacity: ResourceSlot) -> Decimal:
    """Max over slots of ``held`` / ``capacity``: the owner's share of the group.

    ``held`` is what the owner occupies in the group, ``capacity`` the group's
    total. Slots the group does not have are left out (nothing to share), and
    holding nothing is a share of 0.
    """
    return max(
        (amount / capacity[slot] for slot, amount in held.items() if slot in capacity),
        default=Decimal(0),
    )
