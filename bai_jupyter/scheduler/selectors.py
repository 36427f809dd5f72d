"""Agent selectors: where the kernels of a session go.

A custom selector subclasses :class:`AgentSelector`, implements :meth:`select`
(pick one of the agents that fit) and is registered in the entry-point group
``bai_jupyter.agent_selectors``. The built-ins override :meth:`choose` to use the
pool's sorted index instead of looking at every agent.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .config import OptionParser, parse_options
from .placement import BLOCK, AgentPool, AgentState, Partition, Vector, fits


class AgentSelector:
    """Base class of agent selectors."""

    name: ClassVar[str] = ""
    #: Options this selector understands: name → parser.
    OPTIONS: ClassVar[dict[str, OptionParser]] = {}

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = parse_options(options or {}, self.OPTIONS, f"selector {self.name!r}")

    def select(self, candidates: Sequence[AgentState], request: Vector) -> AgentState | None:
        """Pick one of ``candidates`` (all of which fit ``request``); None to refuse."""
        raise NotImplementedError

    def choose(self, pool: AgentPool, partition: Partition, request: Vector) -> AgentState | None:
        """Pick an agent of ``partition`` for ``request``; the default asks :meth:`select`."""
        candidates = list(pool.fitting(partition, request))
        return self.select(candidates, request) if candidates else None


class ConcentratedSelector(AgentSelector):
    """Best fit: the agent with the least free resources that still fits (packs agents)."""

    name = "concentrated"

    def select(self, candidates: Sequence[AgentState], request: Vector) -> AgentState | None:
        return min(candidates, key=lambda a: (a.free_vector, a.id))

    def choose(self, pool: AgentPool, partition: Partition, request: Vector) -> AgentState | None:
        return next(pool.fitting(partition, request), None)


class DispersedSelector(AgentSelector):
    """Most free resources first (spreads load, leaves room on every agent)."""

    name = "dispersed"

    def select(self, candidates: Sequence[AgentState], request: Vector) -> AgentState | None:
        return max(candidates, key=lambda a: (a.free_vector, a.id))

    def choose(self, pool: AgentPool, partition: Partition, request: Vector) -> AgentState | None:
        entries = partition.entries
        for index in range(len(entries) - 1, -1, -1):
            free, agent_id = entries[index]
            if free < request:  # lexicographically smaller: neither it nor any below fits
                return None
            if fits(request, free):
                return pool.agents[agent_id]
        return None


class RoundRobinSelector(AgentSelector):
    """The next agent, in id order, after the one chosen last, that fits."""

    name = "roundrobin"

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._last: dict[frozenset[str], str] = {}

    def select(self, candidates: Sequence[AgentState], request: Vector) -> AgentState | None:
        return min(candidates, key=lambda a: a.id)

    def choose(self, pool: AgentPool, partition: Partition, request: Vector) -> AgentState | None:
        ids, count = partition.ids, len(partition.ids)
        last = self._last.get(partition.devices)
        index = 0 if last is None or not count else bisect_right(ids, last) % count
        steps = 0
        while steps < count:
            if index % BLOCK == 0:  # a whole block ahead: skip it when none of it fits
                end = min(index + BLOCK, count)
                if not fits(request, pool.block_max(partition, index // BLOCK)):
                    steps += end - index
                    index = end % count
                    continue
            agent = pool.agents[ids[index]]
            if not agent.retired and fits(request, agent.free_vector):
                self._last[partition.devices] = agent.id
                return agent
            steps += 1
            index = (index + 1) % count
        return None
