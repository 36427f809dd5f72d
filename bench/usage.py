"""What live usage costs the manager, per session, against the same manager without it.

Run: ``.venv/bin/python bench/usage.py [--sessions 20] [--seconds 30] [--rounds 3] [--one-shot]``
(needs a Docker engine and the default kernel image).

One manager (Docker backend) runs ``--sessions`` idle interactive sessions (cpu 0.05,
mem 64m). Then, ``--rounds`` times, side by side in the same process:

* **usage on**: one event stream asks for usage (``events(usage=True)``, as the
  JupyterLab extension does): the usage watch reads every session's kernel every
  ``usage_interval`` (2 s: the latest samples of the agent's stats streams, one
  reader per container) and tells an event per session;
* **baseline**: one event stream without usage (nothing is read);

each for ``--seconds``, measuring this process's CPU time (every thread: the stats
readers are threads). Prints both, the difference per session-minute, the share of
one core it is for the sessions run, and their ratio. ``--one-shot`` also measures
the alternative the watch does not use: a one-shot stats request per container every
2 s (``stats?stream=false&one-shot=true``, all at once in the engine's threads).

Everything it starts is removed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import tempfile
import time
from functools import partial
from typing import Any

from bai_jupyter.agents.docker.stats import IDLE_AFTER
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.manager.scoped import ScopedManager
from bai_jupyter.model import Status

TINY = {"cpu": "0.05", "mem": "64m"}


async def _phase(mgr: BaiSessionManager, usage: bool, seconds: float) -> tuple[float, int]:
    """CPU seconds of this process while one stream (with or without usage) is open,
    and the usage events it got."""
    got = 0

    async def follow() -> None:
        nonlocal got
        async for event in ScopedManager(mgr, "bench").events(usage=usage):
            got += event["type"] == "usage"

    task = asyncio.ensure_future(follow())
    await asyncio.sleep(0.5)  # the watch's first read, not counted
    cpu = time.process_time()
    await asyncio.sleep(seconds)
    used = time.process_time() - cpu
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return used, got


async def _one_shot(mgr: BaiSessionManager, seconds: float) -> float:
    """CPU seconds of the alternative: a one-shot stats request per container every 2 s,
    all at once in the engine's threads (one after the other, each would wait up to a
    second for the engine's collector), for ``seconds``."""
    agent: Any = next(iter(mgr.core.agents.values()))
    api = await agent.engine.api()
    sessions = await mgr.list_sessions(statuses={Status.RUNNING})
    cids = [k.container_id for s in sessions for k in s.kernels if k.container_id]
    cpu, end = time.process_time(), time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        await asyncio.gather(
            *(agent.engine.run(partial(api.stats, c, stream=False, one_shot=True)) for c in cids)
        )
        await asyncio.sleep(max(0.0, 2.0 - (time.monotonic() - started)))
    return time.process_time() - cpu


async def main(sessions: int, seconds: float, rounds: int, one_shot: bool) -> None:
    tmp = tempfile.mkdtemp(prefix="bai-bench-usage-")
    mgr = BaiSessionManager(
        backend="docker",
        store_url=f"sqlite:///{tmp}/store.sqlite",
        data_folders_root=f"{tmp}/folders",
    )
    await mgr.start()
    try:
        made = await asyncio.gather(
            *(mgr.create({"resources": TINY}, "bench") for _ in range(sessions))
        )
        for session in made:
            await mgr.wait_for(session.id, {Status.RUNNING}, timeout=300)
        await asyncio.sleep(2)  # the starts' own work settles
        on, off, events = [], [], 0
        for _ in range(rounds):
            used, got = await _phase(mgr, True, seconds)
            on.append(used)
            events += got
            await asyncio.sleep(IDLE_AFTER + 2)  # the stats readers end (not counted)
            off.append((await _phase(mgr, False, seconds))[0])
        span = rounds * seconds
        per_min = (sum(on) - sum(off)) / (sessions * span / 60)
        print(f"{sessions} sessions, {rounds} × {seconds:g} s each way, interval 2 s")
        print(f"  usage on : {sum(on):.3f} CPU s ({events} usage events)")
        print(f"  baseline : {sum(off):.3f} CPU s")
        print(f"  ratio    : {sum(on) / max(sum(off), 1e-9):.2f}×")
        print(f"  cost     : {per_min * 1000:.2f} ms CPU per session-minute")
        print(f"           = {100 * (sum(on) - sum(off)) / span:.3f} % of a core for {sessions}")
        if one_shot:
            used = await _one_shot(mgr, seconds) - sum(off) / rounds
            print(
                f"  instead, one-shot requests every 2 s: {used:.3f} CPU s above the baseline in "
                f"{seconds:g} s = {100 * used / seconds:.3f} % of a core for {sessions}"
            )
    finally:
        live = [s for s in await mgr.list_sessions() if not s.status.is_terminal]
        await asyncio.gather(*(mgr.destroy(s.id) for s in live))
        await mgr.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--one-shot", action="store_true", help="also time one-shot requests instead of streams"
    )
    args = parser.parse_args()
    asyncio.run(main(args.sessions, args.seconds, args.rounds, args.one_shot))
