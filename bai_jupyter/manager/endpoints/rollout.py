"""When a rolling update is done, and when it gives up: no replica of the new
generation became healthy for ``ReplicaKeeper.rollout_timeout`` seconds (since it
began, or since the last one did). Giving up goes back to the generation it rolled
from (``Endpoint.give_up_rollout``), whose replicas kept serving."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence

from ...endpoints import Endpoint, Route
from ...model import Session
from .meta import replica_generation

__all__ = ["RolloutWatch"]


class RolloutWatch:
    """Follows each endpoint's rolling update from round to round."""

    def __init__(self, timeout: Callable[[], float]) -> None:
        self.timeout = timeout
        #: Endpoint id → (generation, its replicas proven healthy, when that count grew).
        self._progress: dict[str, tuple[int, int, float]] = {}

    def verdict(
        self,
        endpoint: Endpoint,
        live: Sequence[Session],
        route: Route,
        proven: Collection[str],
        errors: Mapping[str, str],
    ) -> tuple[bool, str] | None:
        """``(True, reason)``: the rollout is done (no replica of an older generation is
        left, one of the new is ready); ``(False, reason)``: give it up; None: go on.
        ``live``: the endpoint's replicas not being ended; ``proven``: those that were
        healthy once; ``errors``: what went wrong last with an endpoint's replica."""
        rollout = endpoint.rollout
        if rollout is None or rollout["state"] != "rolling":
            self._progress.pop(endpoint.id, None)
            return None
        generation = endpoint.generation
        current = [s for s in live if replica_generation(s) == generation]
        if not any(replica_generation(s) < generation for s in live) and any(
            s.id in route.replicas and route.replicas[s.id].ready for s in current
        ):
            self._progress.pop(endpoint.id, None)
            return True, f"rolling update to generation {generation}: done"
        now = time.time()
        healthy = sum(1 for s in current if s.id in proven)
        seen_generation, seen, _ = self._progress.get(endpoint.id, (0, 0, 0.0))
        if seen_generation != generation:
            self._progress[endpoint.id] = (generation, healthy, 0.0)
        elif healthy > seen:  # one more new replica became healthy: progress
            self._progress[endpoint.id] = (generation, healthy, now)
        since = max(float(rollout["since"]), self._progress[endpoint.id][2])
        limit = self.timeout()
        if now - since <= limit:
            return None
        self._progress.pop(endpoint.id, None)
        problems = [
            route.replicas[s.id].problem
            for s in current
            if s.id in route.replicas and route.replicas[s.id].problem
        ]
        why = errors.get(endpoint.id) or (problems[0] if problems else "")
        if not why:
            states = sorted({s.status.value for s in current})
            why = f"its replicas are {', '.join(states)}" if states else "none started"
        return False, (
            f"rolling update to generation {generation} given up: no new replica became "
            f"healthy in {limit:g} s ({why}); back to generation {rollout['from']}, whose "
            "replicas keep serving"
        )
