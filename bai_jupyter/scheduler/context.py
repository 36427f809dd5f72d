"""What one scheduling pass knows about the world, kept current as it places sessions."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from ..model import Agent, Session, SessionResult, Status
from ..resources import ResourceSlot
from .config import SchedulerConfig
from .shares import dominant_share


@dataclass
class Snapshot:
    """Everything a pass reads, loaded in the same transaction that will apply its result."""

    agents: list[Agent]
    #: Pending sessions of the group, any order.
    pending: list[Session]
    #: Status and result of every session a pending session depends on.
    dependency_states: dict[str, tuple[Status, SessionResult]] = field(default_factory=dict)
    #: Per owner, sessions that hold resources anywhere (for the concurrency limit).
    owner_sessions: dict[str, int] = field(default_factory=dict)
    #: Per owner, resources held anywhere (for the per-owner resource limit).
    owner_occupied: dict[str, ResourceSlot] = field(default_factory=dict)
    #: Per owner, resources held in this group (for DRF's dominant share).
    owner_group_occupied: dict[str, ResourceSlot] = field(default_factory=dict)
    #: Per owner, the user groups they are in (a JupyterHub's), for group-first fair share.
    owner_groups: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class PassContext:
    """A pass's mutable view: the snapshot's counters plus this pass's placements."""

    now: float
    config: SchedulerConfig
    snapshot: Snapshot
    capacity: ResourceSlot

    def dominant_share(self, owner: str) -> Decimal:
        """Max over slots of the owner's occupied amount / the group's capacity."""
        held = self.snapshot.owner_group_occupied.get(owner)
        return dominant_share(held, self.capacity) if held else Decimal(0)

    def fair_share_group(self, owner: str) -> str:
        """The group ``owner`` shares as (their first group; alone, a group of their own)."""
        groups = self.snapshot.owner_groups.get(owner)
        return f"group:{min(groups)}" if groups else f"user:{owner}"

    def group_share(self, group: str) -> Decimal:
        """The dominant share of everything the owners of ``group`` hold together."""
        held = ResourceSlot()
        for owner, slots in self.snapshot.owner_group_occupied.items():
            if self.fair_share_group(owner) == group:
                held = held + slots
        return dominant_share(held, self.capacity)

    def record_placement(self, session: Session) -> None:
        """Count a session placed by this pass against its owner."""
        snap, owner, whole = self.snapshot, session.owner, session.spec.total_resources
        snap.owner_sessions[owner] = snap.owner_sessions.get(owner, 0) + 1
        snap.owner_occupied[owner] = snap.owner_occupied.get(owner, ResourceSlot()) + whole
        snap.owner_group_occupied[owner] = (
            snap.owner_group_occupied.get(owner, ResourceSlot()) + whole
        )
