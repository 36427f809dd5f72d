"""A simulated day of a 2,000-user Hub replayed through the real manager and store, fast.

Run: ``.venv/bin/python bench/day.py [--users 2000] [--minutes 4] [--plot day.svg]``
(PostgreSQL through ``BAI_TEST_POSTGRES_URL``, as ``./scripts/test`` sets up; without
it, SQLite only).

The trace is the simulator's format, made by ``bench/day_trace.py`` (``--write
PATH`` saves it for ``bai-jupyter simulate``). Its day is replayed in ``--minutes``
of wall time (4 min: 360× faster than life), once per store engine:

* what runs for real: a ``BaiSessionManager`` with its scheduling loop (DRF, the
  trace's sequencer), the store (SQLite file, a fresh PostgreSQL database), the
  admission path (``manager.create`` as each user, at the trace's instant), the
  lifecycle driver, the kernel-event watcher that ends a batch session when its
  kernel exits, the liveness and retention loops;
* what stands in for the kernels: ``bench/day_agent.TimerAgent``, one per agent of
  the trace with its slots, which starts no process: a session's kernel is ready
  at once and its ``sleep N`` batch command (N = the trace's duration ÷ the speed-up)
  is a timer whose end is reported as the kernel's exit. Thousands of real kernels
  cannot start on a 2-core machine in minutes; what is measured is the scheduler
  and the store under a day's load, not kernel start-up (see kernel_start.py).

The baseline is the simulator's own replay of the same trace, in the same process
(``simulate``: the production pass under a simulated clock, instant starts). Printed:
pass times (percentiles), waits per session and per user in simulated seconds
(real wait × the speed-up, from the request's instant to SCHEDULED in the store's
history), the worst users, Jain's fairness index over users' mean waits and mean
slowdowns ((wait + duration) ÷ duration), each as replay ÷ simulator; and an SVG plot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from day_agent import TimerAgent
from day_plot import write_svg
from day_trace import DAY, jain, make_day, per_user, percentile

from bai_jupyter.agents.base import AgentBackend
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.manager.watchdogs.scheduling import PassStats
from bai_jupyter.model import NOT_ENDED, Status
from bai_jupyter.scheduler.simulator import simulate


class PassTimes(PassStats):
    """The manager's own pass statistics, keeping every pass: (wall time, seconds, placed)."""

    samples: list[tuple[float, float, int]]

    def record(self, seconds: float, placed: int) -> None:
        super().record(seconds, placed)
        if not hasattr(self, "samples"):
            self.samples = []
        self.samples.append((time.time(), seconds, placed))


class DayManager(BaiSessionManager):
    """The real manager, its agents the trace's, as timer agents (the one thing replaced)."""

    def __init__(self, trace_agents: list[dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.trace_agents = trace_agents
        self.scheduling.stats = defaultdict[str, PassStats](PassTimes)

    async def _make_agents(self) -> list[AgentBackend]:
        return [TimerAgent(a["id"], slots=a["slots"], parent=self) for a in self.trace_agents]


@dataclass
class Replay:
    """One replay's facts, times in simulated seconds unless named otherwise."""

    engine: str
    speed: float
    wall: float = 0.0
    #: trace id → wait (request → SCHEDULED), simulated seconds.
    waits: dict[str, float] = field(default_factory=dict)
    #: trace id → request → RUNNING, simulated seconds.
    to_running: dict[str, float] = field(default_factory=dict)
    #: (seconds since the start, pass seconds, placed).
    passes: list[tuple[float, float, int]] = field(default_factory=list)
    creates: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    ended: dict[str, int] = field(default_factory=dict)


async def replay(url: str, engine: str, trace: dict[str, Any], speed: float) -> Replay:
    """Submit each session at its instant ÷ ``speed``; wait until every one ended."""
    out = Replay(engine, speed)
    manager = DayManager(
        trace["agents"],
        store_url=url,
        resource_groups={"default": trace["scheduler"]},
        default_max_pending=None,
    )
    await manager.start()
    ids: dict[str, str] = {}
    submitted: dict[str, float] = {}
    tasks: set[asyncio.Task[None]] = set()

    async def create(s: dict[str, Any], at: float) -> None:
        request = {
            "type": "batch",
            "startup_command": f"sleep {s['duration'] / speed:.3f}",
            "resources": s["resources"],
        }
        started = time.perf_counter()
        try:
            session = await manager.create(request, s["owner"])
        except Exception as exc:  # counted and shown: a replay reports, it does not stop
            out.errors.append(f"{s['id']}: {type(exc).__name__}: {exc}")
            return
        out.creates.append(time.perf_counter() - started)
        ids[session.id] = s["id"]
        submitted[s["id"]] = at

    t0 = time.time()
    try:
        for s in trace["sessions"]:
            at = t0 + s["submit_at"] / speed
            if (delay := at - time.time()) > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(create(s, at))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        while tasks:
            await asyncio.wait(list(tasks))
        longest = max(s["duration"] for s in trace["sessions"]) / speed
        for _ in range(int(longest + 600) // 2):  # the store says when all have ended
            if not await manager.list_sessions(statuses=NOT_ENDED):
                break
            await asyncio.sleep(2)
        out.wall = time.time() - t0
        sessions = await manager.list_sessions()
    finally:
        await manager.stop()
    for session in sessions:
        tid = ids.get(session.id)
        if tid is None:
            continue
        out.ended[session.status.value] = out.ended.get(session.status.value, 0) + 1
        first: dict[Status, float] = {}
        for entry in session.status_history:
            first.setdefault(entry.status, entry.at)
        if Status.SCHEDULED in first:
            out.waits[tid] = (first[Status.SCHEDULED] - submitted[tid]) * speed
        if Status.RUNNING in first:
            out.to_running[tid] = (first[Status.RUNNING] - submitted[tid]) * speed
    stats = manager.scheduling.stats.get("default")
    out.passes = [(at - t0, sec, n) for at, sec, n in getattr(stats, "samples", [])]
    return out


@contextmanager
def store_url(engine: str, work: Path) -> Iterator[str]:
    if engine == "sqlite":
        yield f"sqlite:///{work / 'store.sqlite'}"
        return
    from conftest import postgres_database

    with postgres_database(os.environ["BAI_TEST_POSTGRES_URL"]) as url:
        yield url


# ---------------------------------------------------------------------------
# The report


def _s(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b else ("1.00×" if not a else "—")


def wait_figures(trace: dict[str, Any], waits: dict[str, float]) -> dict[str, float]:
    """Per session and per user: percentiles, the worst user, Jain's indexes."""
    rows = [s for s in trace["sessions"] if s["id"] in waits]
    values = [waits[s["id"]] for s in rows]
    owners = [s["owner"] for s in rows]
    slow = [(waits[s["id"]] + s["duration"]) / s["duration"] for s in rows]
    users = per_user(owners, values)
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values, default=0.0),
        "mean": sum(values) / len(values) if values else 0.0,
        "user p50": percentile(list(users.values()), 50),
        "user p95": percentile(list(users.values()), 95),
        "user max": max(users.values(), default=0.0),
        "jain wait": jain(users.values()),
        "jain slowdown": jain(per_user(owners, slow).values()),
    }


def report(trace: dict[str, Any], sim: dict[str, float], runs: list[Replay]) -> None:
    n, users = len(trace["sessions"]), len({s["owner"] for s in trace["sessions"]})
    cpu = sum(int(a["slots"]["cpu"]) for a in trace["agents"])
    print(f"\ntrace: {n} sessions of {users} users, {len(trace['agents'])} agents ({cpu} cpu)")
    for run in runs:
        ended = ", ".join(f"{k} {v}" for k, v in sorted(run.ended.items()))
        secs = [p[1] for p in run.passes]
        print(
            f"\n[{run.engine}] day replayed in {run.wall:.0f} s wall ({run.speed:.0f}× faster); "
            f"{len(run.creates)} creates, {len(run.errors)} errors; ended: {ended}"
        )
        for error in run.errors[:5]:
            print(f"  error {error}")
        print(
            f"  passes: {len(secs)}, placed {sum(p[2] for p in run.passes)}; pass time p50 "
            f"{percentile(secs, 50) * 1e3:.1f} ms, p95 {percentile(secs, 95) * 1e3:.1f} ms, "
            f"p99 {percentile(secs, 99) * 1e3:.1f} ms, max {max(secs, default=0) * 1e3:.1f} ms"
        )
        print(
            f"  create (manager.create → PENDING): p50 {percentile(run.creates, 50) * 1e3:.1f} "
            f"ms, p99 {percentile(run.creates, 99) * 1e3:.1f} ms"
        )
        idle = [run.waits[s] for s in run.waits if sim.get(s) == 0]
        if idle:
            print(
                "  where the simulator waits 0: request → SCHEDULED p50 "
                f"{percentile(idle, 50) / run.speed * 1e3:.0f} ms, p95 "
                f"{percentile(idle, 95) / run.speed * 1e3:.0f} ms wall (the manager's latency)"
            )
        real = wait_figures(trace, run.waits)
        base = wait_figures(trace, {k: v for k, v in sim.items() if k in run.waits})
        print(f"  {'simulated seconds':<18}{'replay':>12}{'simulator':>12}{'replay ÷ sim':>14}")
        for key in real:
            a, b = real[key], base[key]
            if key.startswith("jain"):
                print(f"  {key:<18}{a:>12.3f}{b:>12.3f}{_ratio(a, b):>14}")
            else:
                print(f"  {'wait ' + key:<18}{_s(a):>12}{_s(b):>12}{_ratio(a, b):>14}")
        worst = sorted(
            per_user(
                [s["owner"] for s in trace["sessions"] if s["id"] in run.waits],
                [run.waits[s["id"]] for s in trace["sessions"] if s["id"] in run.waits],
            ).items(),
            key=lambda kv: -kv[1],
        )[:5]
        sim_users = per_user(
            [s["owner"] for s in trace["sessions"]], [sim[s["id"]] for s in trace["sessions"]]
        )
        print(
            "  worst users (mean wait): "
            + ", ".join(f"{u} {_s(w)} (sim {_s(sim_users[u])})" for u, w in worst)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=2_000)
    parser.add_argument("--minutes", type=float, default=4.0, help="wall minutes for the day")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--plot", default=str(Path(tempfile.gettempdir()) / "bai-day.svg"))
    parser.add_argument("--write", help="save the trace here (for bai-jupyter simulate)")
    args = parser.parse_args()
    trace = make_day(args.users, args.seed)
    if args.write:
        Path(args.write).write_text(json.dumps(trace), encoding="utf-8")
        print(f"trace written to {args.write}")
    started = time.perf_counter()
    result = simulate(trace)
    print(f"simulator (baseline, same process): {time.perf_counter() - started:.1f} s")
    sim = {row.id: row.wait for row in result.sessions if row.wait is not None}
    speed = DAY / (args.minutes * 60)
    engines = [e for e in args.engines.split(",") if e]
    if "postgresql" in engines and not os.environ.get("BAI_TEST_POSTGRES_URL"):
        print("postgresql: skipped (BAI_TEST_POSTGRES_URL is not set)")
        engines.remove("postgresql")
    print("replaying through BaiSessionManager + the store; kernels: TimerAgent (start nothing)")
    runs = []
    for engine in engines:
        with (
            tempfile.TemporaryDirectory(prefix="bai-day-") as work,
            store_url(engine, Path(work)) as url,
        ):
            runs.append(asyncio.run(replay(url, engine, trace, speed)))
    report(trace, sim, runs)
    write_svg(Path(args.plot), trace, sim, [(r.engine, r.waits, r.passes) for r in runs])
    print(f"\nplot: {args.plot}")


if __name__ == "__main__":
    main()
