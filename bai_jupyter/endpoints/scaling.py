"""How many replicas an endpoint wants, and which to start or drain to get there (pure).

The controller (``manager/endpoints.py``) measures, then asks :class:`Autoscaler`
for the replica count and :func:`plan_replicas` for the steps; neither does I/O,
so both are tested on their own (tests/test_endpoint_scaling.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from .spec import Scaling

__all__ = ["Autoscaler", "Load", "LoadMeter", "Plan", "ReplicaState", "plan_replicas"]


@dataclass(frozen=True)
class Load:
    """An endpoint's load over the last ``seconds`` (at most its window)."""

    #: Requests in flight, all replicas together, averaged over time.
    in_flight: float = 0.0
    #: Requests answered per second.
    rps: float = 0.0
    seconds: float = 0.0

    def to_json(self) -> dict[str, float]:
        return {
            "in_flight": round(self.in_flight, 3),
            "rps": round(self.rps, 3),
            "seconds": round(self.seconds, 3),
        }


class LoadMeter:
    """Requests in flight and answered, integrated over time, sampled into a window."""

    def __init__(self, now: float) -> None:
        self.in_flight = 0
        self._last = self._sampled = now
        self._area = 0.0
        self._done = 0
        #: (end, seconds, in-flight area, answered) per sample, oldest first.
        self._samples: deque[tuple[float, float, float, int]] = deque()

    def _advance(self, now: float) -> None:
        if now > self._last:
            self._area += self.in_flight * (now - self._last)
            self._last = now

    def begin(self, now: float) -> None:
        self._advance(now)
        self.in_flight += 1

    def end(self, now: float) -> None:
        self._advance(now)
        self.in_flight -= 1
        self._done += 1

    def sample(self, now: float, window: float) -> Load:
        """Close the interval since the last sample; the load over the last ``window`` s."""
        self._advance(now)
        self._samples.append((now, max(now - self._sampled, 0.0), self._area, self._done))
        self._sampled, self._area, self._done = now, 0.0, 0
        while self._samples[0][0] <= now - window:
            self._samples.popleft()
        seconds = sum(s[1] for s in self._samples)
        if seconds <= 0:
            return Load(float(self.in_flight), 0.0, 0.0)
        area = sum(s[2] for s in self._samples)
        done = sum(s[3] for s in self._samples)
        return Load(area / seconds, done / seconds, seconds)


class Autoscaler:
    """The scaling rule over time: up at once, down one replica per window of low load."""

    def __init__(self) -> None:
        self._low_since: float | None = None
        self._last_change = -math.inf

    @staticmethod
    def wanted(scaling: Scaling, load: Load) -> tuple[int, str]:
        """The count the load asks for now, and the measure in words."""
        value = load.in_flight if scaling.metric == "inflight" else load.rps
        count = math.ceil(value / scaling.target - 1e-9) if value > 0 else 0
        count = min(max(count, scaling.min_replicas), scaling.max_replicas)
        what = "requests in flight" if scaling.metric == "inflight" else "requests/s"
        measure = (
            f"{value:.2f} {what} over the last {load.seconds:.0f} s, "
            f"target {scaling.target:g} per replica"
        )
        return count, measure

    def step(self, scaling: Scaling, desired: int, load: Load, now: float) -> tuple[int, str]:
        """The new desired count and why ("" when it stays)."""
        bounded = min(max(desired, scaling.min_replicas), scaling.max_replicas)
        if bounded != desired:
            self._changed(now)
            return bounded, (
                f"scaling is now {scaling.min_replicas} to {scaling.max_replicas} replicas"
            )
        count, measure = self.wanted(scaling, load)
        if count > desired:
            self._changed(now)
            return count, f"{measure}: more replicas"
        if count == desired:
            self._low_since = None
            return desired, ""
        if self._low_since is None:
            self._low_since = now
        quiet = now - self._low_since
        if quiet >= scaling.window and now - self._last_change >= scaling.window:
            self._last_change = self._low_since = now  # the next one a window later
            return desired - 1, f"{measure}: {count} would do for {quiet:.0f} s, one fewer"
        return desired, ""

    def _changed(self, now: float) -> None:
        self._last_change = now
        self._low_since = None


@dataclass(frozen=True)
class ReplicaState:
    """What the plan needs of one live replica that is not draining."""

    id: str
    generation: int
    #: Healthy: requests go to it.
    ready: bool
    in_flight: int = 0


@dataclass(frozen=True)
class Plan:
    """Replicas to start (of the newest generation) and to drain (then end)."""

    create: int = 0
    drain: tuple[str, ...] = ()


def plan_replicas(replicas: Sequence[ReplicaState], desired: int, generation: int) -> Plan:
    """The steps towards ``desired`` ready replicas, all of ``generation``.

    A rolling update keeps at most one replica more than desired: a new one starts,
    and an old one drains only once a new one is ready in its place. Never drains
    below ``min(desired, ready now)`` ready replicas; what is not ready goes first.
    """
    new = [r for r in replicas if r.generation >= generation]
    old = [r for r in replicas if r.generation < generation]
    if not old:
        if len(new) < desired:
            return Plan(create=desired - len(new))
        spare = sorted(new, key=lambda r: (r.ready, r.in_flight))[: len(new) - desired]
        return Plan(drain=tuple(r.id for r in spare))
    drain = [r.id for r in old if not r.ready]
    old_ready = sorted((r for r in old if r.ready), key=lambda r: r.in_flight)
    new_ready = sum(r.ready for r in new)
    excess = max(len(old_ready) + new_ready - desired, 0)
    drain += [r.id for r in old_ready[:excess]]
    live = len(new) + len(old_ready) - excess
    create = max(desired - live, 0)
    if not create and new_ready == len(new) and len(new) < desired:
        create = 1  # the next new one; an old one drains when it is ready
    return Plan(create, tuple(drain))
