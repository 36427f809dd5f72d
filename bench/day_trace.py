"""A simulated day of a Hub's users as a simulator trace, and the figures ``bench/day.py`` prints.

The trace is the simulator's own JSON format (``bai_jupyter.scheduler.simulator``,
docs/scheduler.md): ``bai-jupyter simulate`` replays the file ``bench/day.py --write``
saves. Users come in three kinds (their share, sessions a day, per-session cpu):
notebook users (70 %, 1-3, 1-2 cpu), power users (25 %, 2-6, 2-8 cpu) and batch users
(5 %, 5-20, 4-16 cpu), 4 GiB of memory per cpu. Requests follow a working day: a
morning peak near 10:30, an afternoon one near 15:00, a few at any hour. Durations are
log-normal (median 40 min, 5 min to 8 h). The group is sized to 80 % of the peak
demand for cpu, so queues form at the peaks and the scheduler's fairness shows.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Any

DAY = 86_400.0
#: (kind, share of users, sessions a day, per-session cpu choices)
KINDS = [
    ("notebook", 0.70, (1, 3), [1, 1, 2]),
    ("power", 0.25, (2, 6), [2, 4, 4, 8]),
    ("batch", 0.05, (5, 20), [4, 8, 16]),
]
AGENT_CPU = 64


def _submit_at(rng: random.Random) -> float:
    pick = rng.random()
    if pick < 0.55:
        hour = rng.gauss(10.5, 1.5)
    elif pick < 0.95:
        hour = rng.gauss(15.0, 1.8)
    else:
        hour = rng.uniform(0, 24)
    return round(min(max(hour, 0.0), 23.0) * 3600.0, 1)


def _duration(rng: random.Random) -> float:
    minutes = math.exp(rng.gauss(math.log(40), 0.9))
    return round(min(max(minutes, 5.0), 480.0) * 60.0, 1)


def _kind(pick: float) -> tuple[tuple[int, int], list[int]]:
    """The sessions a day and cpu choices of the kind ``pick`` (uniform in [0, 1)) falls in."""
    for _name, share, sessions, cpus in KINDS:
        if pick < share:
            return sessions, cpus
        pick -= share
    return KINDS[-1][2], KINDS[-1][3]


def peak_cpu(sessions: Iterable[dict[str, Any]]) -> int:
    """The most cpu the sessions ask for at one instant if each ran at once on submit."""
    changes = []
    for s in sessions:
        cpu = int(s["resources"]["cpu"])
        changes += [(s["submit_at"], cpu), (s["submit_at"] + s["duration"], -cpu)]
    now = peak = 0
    for _, delta in sorted(changes, key=lambda c: (c[0], c[1])):
        now += delta
        peak = max(peak, now)
    return peak


def make_day(users: int = 2_000, seed: int = 26, load: float = 1.25) -> dict[str, Any]:
    """A day of ``users`` users as a trace; the group has 1/``load`` of the peak demand."""
    rng = random.Random(seed)
    sessions: list[dict[str, Any]] = []
    for u in range(users):
        owner = f"user{u:04d}"
        (low, high), cpus = _kind(rng.random())
        for _ in range(rng.randint(low, high)):
            cpu = rng.choice(cpus)
            sessions.append(
                {
                    "owner": owner,
                    "submit_at": _submit_at(rng),
                    "duration": _duration(rng),
                    "resources": {"cpu": str(cpu), "mem": f"{4 * cpu}g"},
                }
            )
    sessions.sort(key=lambda s: s["submit_at"])
    for i, s in enumerate(sessions):
        s["id"] = f"d{i:05d}"
    agents = max(1, round(peak_cpu(sessions) / load / AGENT_CPU))
    return {
        "description": f"a day of {users} users (bench/day_trace.py, seed {seed})",
        # Two days: every session of the day ends within the run, however long it waited.
        "until": 2 * DAY,
        "agents": [
            {"id": f"agent-{a:03d}", "slots": {"cpu": str(AGENT_CPU), "mem": f"{4 * AGENT_CPU}g"}}
            for a in range(agents)
        ],
        "scheduler": {"sequencer": "drf", "selector": "concentrated"},
        "sessions": sessions,
    }


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (as the simulator's ``p95_wait``); 0 for no values."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] if ordered else 0.0


def jain(values: Iterable[float]) -> float:
    """Jain's fairness index: 1 when every value is equal, 1/n when one has everything."""
    xs = list(values)
    square = sum(x * x for x in xs)
    return sum(xs) ** 2 / (len(xs) * square) if square else 1.0


def per_user(owners: Sequence[str], values: Sequence[float]) -> dict[str, float]:
    """Each owner's mean of ``values``."""
    sums: dict[str, list[float]] = {}
    for owner, value in zip(owners, values):
        sums.setdefault(owner, []).append(value)
    return {owner: sum(v) / len(v) for owner, v in sums.items()}
