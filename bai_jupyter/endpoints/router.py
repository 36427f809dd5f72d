"""Where an endpoint's requests go: round-robin over its healthy replicas (in memory).

The controller (``manager/endpoints.py``) keeps each endpoint's :class:`Route`
up to date (replicas as they start, pass health checks, drain and end); the
endpoint proxy (``server/endpoints.py``) picks a replica per request and says
when the request is done, which is what the load meter measures.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from .scaling import Load, LoadMeter

__all__ = ["Replica", "Route", "Router"]


@dataclass
class Replica:
    """A replica session as the router sees it."""

    session_id: str
    generation: int
    host: str
    port: int
    #: Passed its last health check (and no connection failed since): requests go to it.
    healthy: bool = False
    #: On its way out: no new requests; ended once ``in_flight`` is 0.
    draining: bool = False
    in_flight: int = 0
    answered: int = 0
    #: Consecutive failed health checks or connections.
    failures: int = 0
    #: When it was added, last healthy, and started draining (``time.monotonic``).
    added_at: float = field(default_factory=time.monotonic)
    healthy_at: float | None = None
    draining_at: float | None = None
    checked_at: float = 0.0
    #: Set once a draining replica has no request left.
    drained: asyncio.Event | None = None
    #: What its last failed health check or connection said.
    problem: str = ""

    @property
    def ready(self) -> bool:
        return self.healthy and not self.draining

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "generation": self.generation,
            "healthy": self.healthy,
            "draining": self.draining,
            "in_flight": self.in_flight,
            "answered": self.answered,
            "problem": self.problem,
        }


class Route:
    """One endpoint's replicas, its round-robin turn and its load."""

    def __init__(self, endpoint_id: str, name: str, owner: str) -> None:
        self.endpoint_id = endpoint_id
        self.name = name
        self.owner = owner
        self.replicas: dict[str, Replica] = {}
        self.meter = LoadMeter(time.monotonic())
        #: The load at the last sample (the controller's).
        self.load = Load()
        self._turn = 0

    def pick(self, tried: set[str] | frozenset[str] = frozenset()) -> Replica | None:
        """The next ready replica not in ``tried`` (round-robin), or None."""
        ready = sorted(
            (r for r in self.replicas.values() if r.ready and r.session_id not in tried),
            key=lambda r: r.session_id,
        )
        if not ready:
            return None
        self._turn += 1
        return ready[self._turn % len(ready)]

    def begin(self, replica: Replica) -> None:
        replica.in_flight += 1
        self.meter.begin(time.monotonic())

    def end(self, replica: Replica) -> None:
        replica.in_flight -= 1
        replica.answered += 1
        self.meter.end(time.monotonic())
        if replica.drained is not None and replica.in_flight == 0:
            replica.drained.set()

    def unreachable(self, replica: Replica, problem: str) -> None:
        """A connection to it failed: no more requests until a health check passes."""
        replica.healthy = False
        replica.failures += 1
        replica.problem = problem


class Router:
    """Every endpoint's route, by name (names are unique per manager)."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}

    def route(self, name: str) -> Route | None:
        return self.routes.get(name)
