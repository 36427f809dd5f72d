"""The agents of one resource group during a scheduling pass, indexed for placement.

Amounts are kept as tuples in a fixed slot order so that a fit test is a tuple
walk, and agents are kept sorted by free resources so that best-fit and
most-free choices need not look at every agent.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from ..model import Agent, ClusterMode, SessionSpec
from ..resources import DEVICE_SLOTS, KNOWN_SLOTS, ResourceSlot, format_amount, human_amount

Vector = tuple[Decimal, ...]
#: Agents per block in a partition's id order: a scan skips a block none of whose agents fits.
BLOCK = 32


def fits(request: Vector, free: Vector) -> bool:
    """Every requested amount is at most the free amount (a plain loop: the hot path)."""
    for f, r in zip(free, request):  # noqa: SIM110 - all() with a generator is 2× slower
        if f < r:
            return False
    return True


@dataclass(eq=False)
class AgentState:
    """One agent as seen by a pass: capacity and what is still free."""

    id: str
    capacity: ResourceSlot
    free_vector: Vector
    devices: frozenset[str]
    slots: tuple[str, ...]
    #: Out of the placement index: it cannot hold the pass's smallest kernel any more.
    retired: bool = False

    @property
    def free(self) -> ResourceSlot:
        """Free resources right now (includes this pass's reservations)."""
        return ResourceSlot._exact(dict(zip(self.slots, self.free_vector)))

    @property
    def occupied(self) -> ResourceSlot:
        return self.capacity - self.free


@dataclass
class Partition:
    """Agents that have exactly the same set of device slots."""

    devices: frozenset[str]
    #: (free vector, agent id), sorted: bisect finds the first agent with enough of slot 0.
    entries: list[tuple[Vector, str]] = field(default_factory=list)
    #: Every agent id in order (retired ones too), in blocks of BLOCK for skipping.
    ids: list[str] = field(default_factory=list)
    position: dict[str, int] = field(default_factory=dict)
    #: Per block, the component-wise most any of its agents has free (None: recompute).
    block_max: list[Vector | None] = field(default_factory=list)


class AgentPool:
    """The schedulable agents of a group, with reservations made during one pass."""

    def __init__(self, agents: Sequence[Agent], floor: ResourceSlot | None = None) -> None:
        present = {slot for agent in agents for slot in agent.capacity}
        self.slots: tuple[str, ...] = tuple(s for s in KNOWN_SLOTS if s in present)
        self.agents: dict[str, AgentState] = {}
        #: The smallest amount any placement of this pass asks for (None: no pruning).
        self.floor: Vector | None = None if floor is None else self.vector(floor)
        self.partitions: dict[frozenset[str], Partition] = {}
        #: Agents marked lost (they do not answer): out of the pool until they do.
        self.lost = sorted(a.id for a in agents if not a.schedulable)
        for agent in sorted(agents, key=lambda a: a.id):
            if not agent.schedulable:
                continue
            devices = frozenset(agent.capacity) & DEVICE_SLOTS
            state = AgentState(
                agent.id, agent.capacity, self.vector(agent.free), devices, self.slots
            )
            self.agents[agent.id] = state
            part = self.partitions.setdefault(devices, Partition(devices))
            part.entries.append((state.free_vector, agent.id))
            part.position[agent.id] = len(part.ids)
            part.ids.append(agent.id)
        for part in self.partitions.values():
            part.entries.sort()
            part.block_max = [None] * -(-len(part.ids) // BLOCK)
        self.capacity = ResourceSlot._exact(
            {
                s: sum((a.capacity.get_amount(s) for a in self.agents.values()), Decimal(0))
                for s in self.slots
            }
        )
        #: Max-heaps of free amounts per slot, built on the first max_free() call.
        self._heaps: list[list[tuple[Decimal, str]]] | None = None

    def vector(self, slots: ResourceSlot) -> Vector:
        return tuple(slots.get_amount(s) for s in self.slots)

    def unknown_slots(self, request: ResourceSlot) -> list[str]:
        """Requested slots that no agent of the group has at all."""
        return [s for s in request if s not in self.slots]

    def preferred_partitions(self, request: ResourceSlot) -> list[Partition]:
        """Partitions that can hold ``request``, fewest needless device slots first."""
        wanted = frozenset(request) & DEVICE_SLOTS
        usable = [p for p in self.partitions.values() if wanted <= p.devices]
        return sorted(usable, key=lambda p: (len(p.devices - wanted), sorted(p.devices)))

    def reserve(self, agent_id: str, amount: Vector) -> None:
        self._move(
            agent_id, tuple(f - r for f, r in zip(self.agents[agent_id].free_vector, amount))
        )

    def release(self, agent_id: str, amount: Vector) -> None:
        self._move(
            agent_id, tuple(f + r for f, r in zip(self.agents[agent_id].free_vector, amount))
        )

    def _move(self, agent_id: str, new_free: Vector) -> None:
        state = self.agents[agent_id]
        if any(f < 0 for f in new_free):
            raise AssertionError(f"over-allocation on agent {agent_id}")  # a scheduler bug
        part = self.partitions[state.devices]
        if not state.retired:
            del part.entries[bisect_left(part.entries, (state.free_vector, agent_id))]
        state.free_vector = new_free
        # An agent that cannot hold even the smallest pending kernel leaves the index.
        state.retired = self.floor is not None and not fits(self.floor, new_free)
        if not state.retired:
            insort(part.entries, (new_free, agent_id))
        part.block_max[part.position[agent_id] // BLOCK] = None
        if self._heaps is not None:
            for heap, amount in zip(self._heaps, new_free):
                heapq.heappush(heap, (-amount, agent_id))

    def max_free(self) -> Vector:
        """Per slot, the most any single agent has free right now.

        One max-heap per slot with lazy deletion: a reservation pushes the
        agent's new amount, and stale tops are dropped when read.
        """
        result = []
        if self._heaps is None:
            self._heaps = [
                [(-a.free_vector[i], a.id) for a in self.agents.values()]
                for i in range(len(self.slots))
            ]
            for heap in self._heaps:
                heapq.heapify(heap)
        for index, heap in enumerate(self._heaps):
            while heap and self.agents[heap[0][1]].free_vector[index] != -heap[0][0]:
                heapq.heappop(heap)
            result.append(-heap[0][0] if heap else Decimal(0))
        return tuple(result)

    def block_max(self, part: Partition, block: int) -> Vector:
        """The most any agent in ``block`` of ``part`` has free, per slot (cached)."""
        cached = part.block_max[block]
        if cached is None:
            members = [self.agents[i].free_vector for i in part.ids[block * BLOCK :][:BLOCK]]
            cached = tuple(map(max, zip(*members)))
            part.block_max[block] = cached
        return cached

    def fitting(self, part: Partition, request: Vector) -> Iterator[AgentState]:
        """Agents of ``part`` that fit ``request``, in ascending order of free resources."""
        entries = part.entries
        for index in range(bisect_left(entries, (request,)), len(entries)):
            free, agent_id = entries[index]
            if fits(request, free):
                yield self.agents[agent_id]

    def describe_shortfall(self, spec: SessionSpec) -> str:
        """Why a session does not fit now, in words a user understands, and the lost agents
        of the group (what they hold may be what it waits for)."""
        why = self._shortfall(spec)
        if not self.lost:
            return why
        names = ", ".join(self.lost)
        lost = (
            f"agent {names} does not answer"
            if len(self.lost) == 1
            else f"agents {names} do not answer"
        )
        return f"{why}; {lost} (lost: nothing is placed there until it answers again)"

    def _shortfall(self, spec: SessionSpec) -> str:
        size, whole = spec.cluster_size, spec.total_resources
        # The largest kernel (by its slots in order): what one agent must hold when split.
        per_kernel = (
            max(spec.kernel_slots(), key=self.vector) if not spec.uniform else spec.resources
        )
        biggest = ResourceSlot._exact(dict(zip(self.slots, self.max_free())))
        missing = self.unknown_slots(whole)
        if missing:
            return f"needs {', '.join(missing)} but no agent in the group has any"
        target = whole if spec.cluster_mode is ClusterMode.SINGLE_NODE else per_kernel
        short = target.shortfall(biggest)
        if short:
            return "; ".join(
                f"needs {slot}={format_amount(slot, need)} but the largest agent has "
                f"{human_amount(slot, have)} free"
                for slot, (need, have) in short.items()
            )
        if spec.cluster_mode is ClusterMode.SINGLE_NODE:
            return f"no single agent has {whole.describe()} free at once"
        each = f"{per_kernel.describe()} each" if spec.uniform else "different sizes"
        return f"not enough free agents for {size} kernels of {each} ({whole.describe()} in all)"


def never_fits(spec: SessionSpec, agents: Sequence[Agent]) -> str | None:
    """Why ``spec`` could not run even on the group's empty agents, or None if it could.

    Kernels are equal, so an agent of capacity C holds ``min_s floor(C_s / r_s)``
    kernels and the count over agents decides a multi-node request exactly.
    """
    usable = [a for a in agents if a.schedulable]
    if not usable:
        return "the resource group has no agents"
    per_kernel, size = spec.resources, spec.cluster_size
    whole = spec.total_resources
    if any(whole.fits_in(a.capacity) for a in usable):
        return None
    if spec.cluster_mode is ClusterMode.MULTI_NODE and not spec.uniform:
        if _first_fit_decreasing(spec.kernel_slots(), [a.capacity for a in usable]):
            return None
        return (
            f"needs {size} kernels of different sizes ({whole.describe()} in all) but they "
            "do not fit the group's agents even empty"
        )
    if spec.cluster_mode is ClusterMode.MULTI_NODE:
        held = sum(_kernels_that_fit(per_kernel, a.capacity, size) for a in usable)
        if held >= size:
            return None
        return (
            f"needs {size} kernels of {per_kernel.describe()} but the whole group can hold "
            f"only {held} of them"
        )
    largest = max(usable, key=lambda a: [a.capacity.get_amount(s) for s in KNOWN_SLOTS])
    parts = [
        f"{slot}={format_amount(slot, need)} (largest agent: {human_amount(slot, have)})"
        for slot, (need, have) in whole.shortfall(largest.capacity).items()
    ] or [whole.describe()]
    return f"needs {', '.join(parts)} on one agent, more than any agent of the group has"


def _kernels_that_fit(per_kernel: ResourceSlot, capacity: ResourceSlot, cap: int) -> int:
    counts = [
        int(capacity.get_amount(slot) // amount) for slot, amount in per_kernel.items() if amount
    ]
    return min([cap, *counts])


def _first_fit_decreasing(kernels: list[ResourceSlot], capacities: list[ResourceSlot]) -> bool:
    """Whether the kernels fit on empty agents, largest first each on the first that fits."""
    free = list(capacities)
    for kernel in sorted(
        kernels, key=lambda k: [k.get_amount(s) for s in KNOWN_SLOTS], reverse=True
    ):
        index = next((i for i, room in enumerate(free) if kernel.fits_in(room)), None)
        if index is None:
            return False
        free[index] = free[index] - kernel
    return True
