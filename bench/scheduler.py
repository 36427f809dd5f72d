"""Scheduling-pass time and placements per second, per sequencer × selector.

Run: ``.venv/bin/python bench/scheduler.py [--repeat N] [--quick]``; with ``--scale``,
passes in a store instead (SQLite and PostgreSQL, new against the old way side by
side: see ``bench/store_pass.py``).

Sizes (pending sessions × agents): 1k × 100, 5k × 500, 10k × 1k, 20k × 2k.
Prints, per combination: the median pass time, placements/s, and the ratio of
pass time each time the input doubles (goal ≤ 2.2×), plus the baseline ratio:
the same pass done by a naive scheduler that scans every agent with
``ResourceSlot`` arithmetic (run side by side at 1k × 100, where it finishes).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from bai_jupyter.model import Agent, ClusterMode, Session, SessionSpec
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.scheduler import SchedulerConfig, Snapshot, load_plugins, schedule

SIZES = [(1_000, 100), (5_000, 500), (10_000, 1_000), (20_000, 2_000)]
SEQUENCERS = ["fifo", "lifo", "drf"]
SELECTORS = ["concentrated", "dispersed", "roundrobin"]
ORDER = ("cpu", "mem", "cuda.device")
SHAPES = [(1, 4), (2, 8), (4, 16), (8, 32), (16, 64), (3, 6)]


def make_snapshot(sessions: int, agents: int, seed: int = 7) -> Snapshot:
    """A group partly full and a queue of mixed shapes, sizes, owners and priorities.

    The input is one unit of 100 agents and 1,000 sessions, repeated: doubling
    the input doubles the work exactly (replicas interleave in queue order).
    """
    rng = random.Random(seed)
    unit_agents, unit_sessions = 100, 1_000
    copies = max(1, agents // unit_agents)
    pool: list[Agent] = []
    for i in range(unit_agents):
        gpu = i % 20 == 0
        cap = ResourceSlot({"cpu": 64, "mem": "256g", **({"cuda.device": 8} if gpu else {})})
        used = rng.choice([0, 8, 16, 32])
        occupied = ResourceSlot({"cpu": used, "mem": f"{used}g"})
        pool += [Agent(f"agent-{c:03d}-{i:03d}", cap, occupied) for c in range(copies)]
    pending = []
    for i in range(unit_sessions * max(1, sessions // (unit_sessions * copies))):
        cpu, mem = rng.choice(SHAPES)
        slots: dict[str, int | str] = {"cpu": cpu, "mem": f"{mem}g"}
        if rng.random() < 0.05:
            slots["cuda.device"] = 1
        spec = SessionSpec(
            resources=ResourceSlot(slots),
            cluster_size=rng.choice([1, 1, 1, 2, 4]),
            cluster_mode=rng.choice(list(ClusterMode)),
            priority=rng.choice([10, 10, 10, 20]),
        )
        owner = f"user{rng.randrange(50)}"
        for c in range(copies):
            sid = f"s{i:05d}-{c:03d}"
            pending.append(Session.create(spec, owner, float(i * copies + c), sid))
    return Snapshot(agents=pool, pending=pending)


Run = Callable[[], tuple[float, int]]


def production_pass(sequencer: str, selector: str, size: tuple[int, int]) -> Run:
    config = SchedulerConfig(sequencer=sequencer, selector=selector)

    def run() -> tuple[float, int]:
        snapshot = make_snapshot(*size)  # a fresh one each time; building it is not timed
        seq, sel = load_plugins(config)
        start = time.perf_counter()
        placed = len(schedule(snapshot, config, seq, sel, 1e9).placements)
        return time.perf_counter() - start, placed

    return run


def naive_pass(size: tuple[int, int]) -> Run:
    """LIFO + best fit the obvious way: every session scans every agent's ResourceSlot."""

    def run() -> tuple[float, int]:
        snapshot = make_snapshot(*size)
        start = time.perf_counter()
        free = {a.id: a.free for a in snapshot.agents}
        placed = 0
        for session in sorted(snapshot.pending, key=lambda s: (-s.spec.priority, -s.created_at)):
            spec = session.spec
            needs = [spec.total_resources]
            if spec.cluster_mode is ClusterMode.MULTI_NODE:
                needs = [spec.resources] * spec.cluster_size
            taken = []
            for need in needs:
                fitting = [aid for aid, f in free.items() if need.fits_in(f)]
                if not fitting:
                    break
                best = min(fitting, key=lambda aid: [free[aid].get_amount(s) for s in ORDER])
                free[best] = free[best] - need
                taken.append((best, need))
            if len(taken) == len(needs):
                placed += 1
            else:
                for aid, need in taken:
                    free[aid] = free[aid] + need
        return time.perf_counter() - start, placed

    return run


def measure(run: Run, repeat: int) -> tuple[float, int]:
    """Median of the pass's own time (snapshot building excluded) and its placements."""
    results = [run() for _ in range(repeat)]
    return statistics.median(t for t, _ in results), results[-1][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell (median)")
    parser.add_argument("--quick", action="store_true", help="only the two smallest sizes")
    parser.add_argument(
        "--scale", action="store_true", help="passes in a store: 1k×100 and 10k×1k, both engines"
    )
    parser.add_argument(
        "--old-at-10k", action="store_true", help="with --scale: the old way at 10k×1k too (slow)"
    )
    args = parser.parse_args()
    if args.scale:
        from store_pass import measure_scale

        print(f"passes in a store, drf/concentrated, medians over {args.repeat} fresh stores:")
        measure_scale(make_snapshot, args.repeat, args.old_at_10k)
        return
    sizes = SIZES[:2] if args.quick else SIZES
    base_time, base_placed = measure(naive_pass(SIZES[0]), args.repeat)
    head = f"{'sequencer/selector':<24}" + "".join(f"{f'{s // 1000}k×{a}':>22}" for s, a in sizes)
    print(head + f"{'growth/doubling':>18}")
    worst_growth, slowest_10k, vs_naive, same_placed, placed_first = 0.0, 0.0, 0.0, 0, 0
    for seq in SEQUENCERS:
        for sel in SELECTORS:
            cells, times = [], []
            for size in sizes:
                elapsed, placed = measure(production_pass(seq, sel, size), args.repeat)
                times.append(elapsed)
                if size == sizes[0]:
                    placed_first = placed
                cells.append(f"{elapsed * 1e3:7.1f} ms {placed / elapsed:8.0f}/s")
                if size == (10_000, 1_000):
                    slowest_10k = max(slowest_10k, elapsed)
            growth = [
                b / a
                for (s1, _), (s2, _), a, b in zip(sizes, sizes[1:], times, times[1:])
                if s2 == 2 * s1
            ]
            worst_growth = max([worst_growth, *growth])
            if (seq, sel) == ("lifo", "concentrated"):
                vs_naive, same_placed = base_time / times[0], placed_first
            print(
                f"{seq + '/' + sel:<24}"
                + "".join(f"{c:>22}" for c in cells)
                + f"{' '.join(f'{g:.2f}×' for g in growth):>18}"
            )
    print(
        f"\nbaseline, same run: naive LIFO/best-fit scanning every agent at 1k×100: "
        f"{base_time * 1e3:.1f} ms for {base_placed} placements; lifo/concentrated "
        f"({same_placed} placements) is {vs_naive:.1f}× faster"
    )
    if not args.quick:
        print(f"slowest full pass at 10k×1k: {slowest_10k:.3f} s (goal < 1 s)")
    print(f"worst growth per doubling: {worst_growth:.2f}× (goal ≤ 2.2×)")


if __name__ == "__main__":
    main()
