"""End-to-end throughput: N sessions created at once through the REST API until all run.

Run: ``.venv/bin/python bench/throughput.py [--sessions 40] [--rounds 3]`` (needs a
Docker engine and the default kernel image: ``bai-jupyter image build``).

One ``jupyter server`` with this extension and the docker backend. Two arms,
interleaved round by round so they share the machine's noise:

* ``bai``: ``--sessions`` interactive sessions of size 1 (``cpu 0.05, mem 256m``
  each: all of them fit this machine at once) created by as many concurrent
  ``POST /bai/api/v1/sessions``, timed until the server says every one is
  RUNNING (main1's ipykernel listens);
* ``raw``: as many containers started by hand at once through the Docker SDK, the
  same image and limits, each running ipykernel on a user-defined bridge, timed
  until every heartbeat port accepts a connection (``bench/raw_kernels.py``).

Prints each arm's median, min and max, the ratio of the medians against the goal
(≤ 1.3×), and the scheduler's pass times during the run as the server reports
them (``GET /bai/api/v1/scheduler``: passes, mean and longest).

The sessions, containers and the server are removed on exit, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from docker.client import DockerClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.server import Server, end_all, start_server
from raw_kernels import RawKernels, RawStart

from bai_jupyter.model import Status
from bai_jupyter.runtime.protocol import DEFAULT_IMAGE

SLOTS = {"cpu": "0.05", "mem": "256m"}
GOAL = 1.3
CONFIG = 'c.BaiSessionManager.backend = "docker"\n'
TIMEOUT = 600.0


async def sessions_at_once(server: Server, count: int) -> float:
    """``count`` concurrent creates, timed until all are RUNNING; then all are ended."""
    body = {"type": "interactive", "resources": SLOTS}
    started = time.perf_counter()
    replies = await asyncio.gather(
        *(server.fetch("POST", "bai/api/v1/sessions", body) for _ in range(count))
    )
    ids = set()
    for reply in replies:
        if reply.code != 201:
            raise RuntimeError(f"create failed: {reply.code} {reply.body!r}")
        ids.add(json.loads(reply.body)["id"])
    deadline = time.monotonic() + TIMEOUT
    while True:
        listed = json.loads((await server.fetch("GET", "bai/api/v1/sessions")).body)["sessions"]
        states = {s["id"]: Status(s["status"]) for s in listed if s["id"] in ids}
        if all(state is Status.RUNNING for state in states.values()) and len(states) == count:
            break
        ended = [sid for sid, state in states.items() if state.is_terminal]
        if ended:
            raise RuntimeError(f"{len(ended)} sessions ended before they ran")
        if time.monotonic() > deadline:
            raise RuntimeError("not all sessions ran in time")
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    await asyncio.to_thread(end_all, server)
    return elapsed


def raw_at_once(raw: RawKernels, count: int) -> float:
    """``count`` raw kernels started at once, timed until all listen; then removed."""
    with ThreadPoolExecutor(count) as pool:
        started = time.perf_counter()
        starts: list[RawStart] = list(pool.map(lambda _: raw.start(1, SLOTS), range(count)))
        # Each start returned once its own kernel listened: the last one is the run's end.
        elapsed = time.perf_counter() - started
        list(pool.map(raw.remove, starts))
    return elapsed


async def scheduler_passes(server: Server) -> dict[str, Any]:
    reply = await server.fetch("GET", "bai/api/v1/scheduler")
    passes: dict[str, Any] = json.loads(reply.body)["resource_groups"]["default"]["passes"]
    return passes


async def run(server: Server, raw: RawKernels, count: int, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"bai": [], "raw": []}
    for i in range(rounds + 1):  # the first round warms up, untimed
        line = []
        for arm in ("bai", "raw"):
            if arm == "bai":
                seconds = await sessions_at_once(server, count)
            else:
                seconds = await asyncio.to_thread(raw_at_once, raw, count)
            if i:
                times[arm].append(seconds)
            line.append(f"{arm} {seconds:.2f} s")
            await asyncio.sleep(2)  # the engine finishes removing
        print(("warm-up: " if not i else f"round {i}/{rounds}: ") + ", ".join(line), flush=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40, help="sessions at once (40)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (3)")
    args = parser.parse_args()
    from_env: Any = DockerClient.from_env  # the SDK is untyped
    client: Any = from_env(timeout=300, max_pool_size=args.sessions + 8)
    with tempfile.TemporaryDirectory(prefix="bai-bench-throughput-") as tmp:
        raw = RawKernels(client, DEFAULT_IMAGE, uuid.uuid4().hex[:12], Path(tmp) / "raw")
        server = start_server(Path(tmp) / "server", CONFIG)
        try:
            times = asyncio.run(run(server, raw, args.sessions, args.rounds))
            passes = asyncio.run(scheduler_passes(server))
        finally:
            try:
                end_all(server)
            finally:
                server.stop()
                raw.sweep()
    medians = {arm: statistics.median(t) for arm, t in times.items()}
    print(f"\n{args.sessions} size-1 sessions at once, {args.rounds} rounds (seconds)")
    for arm, samples in times.items():
        print(
            f"{arm:5} median {medians[arm]:6.2f}  min {min(samples):6.2f}  max {max(samples):6.2f}"
        )
    ratio = medians["bai"] / medians["raw"]
    print(f"goal bai ≤ {GOAL}× raw: {ratio:.2f}× {'PASS' if ratio <= GOAL else 'FAIL'}")
    print(
        f"scheduler: {passes['passes']} passes placed {passes['placed']} sessions, "
        f"mean {passes['mean_ms']:.1f} ms, longest {passes['max_ms']:.1f} ms"
    )


if __name__ == "__main__":
    main()
