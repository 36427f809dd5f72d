"""CPU use of running sessions over a sliding window, for the utilization rule.

The idle watch samples each session's CPU time (all its kernels, from its
agents) at every check; this module keeps those samples in memory and says when
the rule would fire: the first moment at which, if the session used no more CPU
from now on, its use over the last ``window`` seconds falls below the bar. A
manager that restarts starts a fresh window (the samples are a measurement, not
state). Pure arithmetic, no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import pairwise

__all__ = ["CpuWindows", "Verdict"]


@dataclass(frozen=True)
class Verdict:
    """When the rule fires if nothing more is used (epoch seconds), and the use so far."""

    deadline: float
    #: Mean CPU use over the window (or what was observed of it), % of the slots.
    cpu_percent: float


class CpuWindows:
    """Samples ``(time, cpu seconds used so far)`` per session."""

    def __init__(self) -> None:
        self._samples: dict[str, deque[tuple[float, float]]] = {}

    def add(self, session_id: str, at: float, cpu_seconds: float, keep: float) -> None:
        """Record a sample; samples older than ``keep`` seconds (but the one just before
        that horizon, needed to interpolate) are dropped. A counter that went back (a
        process's time lost when it ended) counts as no use."""
        points = self._samples.setdefault(session_id, deque())
        if points and cpu_seconds < points[-1][1]:
            cpu_seconds = points[-1][1]
        points.append((at, cpu_seconds))
        while len(points) > 2 and points[1][0] <= at - keep:
            points.popleft()

    def forget(self, session_id: str) -> None:
        self._samples.pop(session_id, None)

    def prune(self, keep: set[str]) -> None:
        """Drop the samples of sessions no longer watched."""
        for session_id in set(self._samples) - keep:
            del self._samples[session_id]

    def verdict(self, session_id: str, cores: float, percent: float, window: float) -> Verdict:
        """When use over ``window`` drops below ``percent`` % of ``cores`` if it stays at
        nothing from the last sample on; a window not yet observed whole is waited out."""
        points = list(self._samples.get(session_id) or ())
        if not points:
            raise KeyError(session_id)
        first_at = points[0][0]
        now, used_now = points[-1]
        budget = percent / 100.0 * window * cores
        observed = now - first_at
        span = min(observed, window)
        mean = 0.0
        if span > 0 and cores > 0:
            mean = (used_now - _at(points, now - span)) / (span * cores) * 100.0
        # The earliest start s of a window [s, s + window] that holds less than the budget:
        # with nothing used after now, that is the first s where the counter exceeds
        # used_now - budget (the counter never falls), but never before the first sample.
        start = max(first_at, now - window)
        target = used_now - budget
        crossing = _crossing(points, target, start)
        return Verdict(deadline=crossing + window, cpu_percent=round(mean, 1))


def _at(points: list[tuple[float, float]], when: float) -> float:
    """The counter at ``when``, interpolated between samples (clamped to their range)."""
    if when <= points[0][0]:
        return points[0][1]
    for (t0, c0), (t1, c1) in pairwise(points):
        if t0 <= when <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (when - t0) / (t1 - t0)
    return points[-1][1]


def _crossing(points: list[tuple[float, float]], target: float, start: float) -> float:
    """The first time from ``start`` on where the counter exceeds ``target``."""
    if _at(points, start) > target:
        return start
    for (t0, _), (t1, c1) in pairwise(points):
        if t1 <= start or c1 <= target:
            continue
        lo = max(t0, start)
        c_lo = _at(points, lo)
        return lo + (target - c_lo) / (c1 - c_lo) * (t1 - lo) if c1 > c_lo else lo
    return points[-1][0]
