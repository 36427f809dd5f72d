"""The multi-node arm of ``bench/cluster_start.py`` (``--multi-node``): three engines.

Brings up three extra Docker engines in one Swarm on this machine
(``tests/harness/engines.py``: each in a network namespace of its own, needs
root; the default engine is left alone) and times, interleaved round by round:

* ``spread3``: a size-3 ``multi-node`` session whose kernels (``cpu 0.25, mem
  600m`` against agents of ``cpu 2, mem 1g``) fit one to an engine, so it is
  spread over the three engines on a Swarm overlay, ``create`` → RUNNING;
* ``one3``: a size-3 session of ``cpu 0.25, mem 256m`` kernels, which one engine
  holds (single-node, on a local bridge of that engine), ``create`` → RUNNING;
* ``raw×3``: three raw containers (``containers.run(IMAGE, sleep 600)``),
  one per engine, started at once, timed until the last start returns.

Prints median, p90, min, max per arm and the ratios of the medians.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import docker.errors

from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.model import Status

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from harness import engines as engines_harness  # the test harness: three engines in a Swarm

SLOTS = {"cpu": "2", "mem": "1g"}
SPREAD = {
    "cluster_size": 3,
    "cluster_mode": "multi-node",
    "resources": {"cpu": "0.25", "mem": "600m"},
}
ONE = {
    "cluster_size": 3,
    "cluster_mode": "single-node",
    "resources": {"cpu": "0.25", "mem": "256m"},
}
ARMS = ("spread3", "one3", "raw×3")
LABEL = "bai-jupyter-bench.multinode"
START_TIMEOUT = 180.0


async def _session(mgr: BaiSessionManager, request: dict[str, Any], agents: int) -> float:
    start = time.perf_counter()
    session = await mgr.create(dict(request), "bench")
    session = await mgr.wait_for(session.id, {Status.RUNNING}, timeout=START_TIMEOUT)
    elapsed = time.perf_counter() - start
    try:
        if session.status is not Status.RUNNING:
            raise RuntimeError(
                f"{session.status.value} {session.status_info}: {session.status_data}"
            )
        spread = len({k.agent_id for k in session.kernels})
        if spread != agents:
            raise RuntimeError(f"the session ran on {spread} agents, not {agents}")
    finally:
        await mgr.destroy(session.id)
    return elapsed


def _raw(clients: list[Any], image: str, run_id: str) -> float:
    """One container per engine, all started at once; removed after timing."""

    def run(client: Any) -> str:
        made = client.containers.run(
            image, ["sleep", "600"], detach=True, init=True, labels={LABEL: run_id}
        )
        return str(made.id)

    with ThreadPoolExecutor(len(clients)) as pool:
        start = time.perf_counter()
        futures = [pool.submit(run, client) for client in clients]
        wait(futures)
        elapsed = time.perf_counter() - start
    for client in clients:
        for found in client.api.containers(all=True, filters={"label": f"{LABEL}={run_id}"}):
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_container(found["Id"], force=True)
    for future in futures:
        future.result()
    return elapsed


async def _measure(
    engines: Any, image: str, root: Path, runs: int, warmup: int, settle: float
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {arm: [] for arm in ARMS}
    clients = [node.client() for node in engines.nodes]
    mgr = BaiSessionManager(
        store_url=f"sqlite:///{root / 'store.sqlite'}",
        agents=engines.agents(SLOTS),
        default_image=image,
        data_folders_root=str(root / "folders"),
    )
    await mgr.start()
    try:
        for i in range(warmup + runs):
            line = []
            for arm in ARMS:
                if arm == "spread3":
                    seconds = await _session(mgr, SPREAD, 3)
                elif arm == "one3":
                    seconds = await _session(mgr, ONE, 1)
                else:
                    seconds = await asyncio.to_thread(_raw, clients, image, f"{i}")
                if i >= warmup:
                    samples[arm].append(seconds)
                line.append(f"{arm} {seconds * 1e3:.0f}")
                await asyncio.sleep(settle)
            what = f"run {i - warmup + 1}/{runs}" if i >= warmup else f"warm-up {i + 1}/{warmup}"
            print(f"{what}: " + ", ".join(line) + " ms", file=sys.stderr, flush=True)
    finally:
        for session in await mgr.list_sessions():
            if not session.status.is_terminal:
                with contextlib.suppress(Exception):
                    await mgr.destroy(session.id)
        await mgr.stop()
        for client in clients:
            client.close()
    return samples


def _report(samples: dict[str, list[float]]) -> None:
    medians = {arm: statistics.median(v) for arm, v in samples.items() if v}
    print(f"{'arm':<9}{'n':>4}{'median':>10}{'p90':>10}{'min':>10}{'max':>10}")
    for arm, values in samples.items():
        if not values:
            continue
        ordered = sorted(values)
        p90 = ordered[max(0, -(-9 * len(ordered) // 10) - 1)]
        cells = [medians[arm], p90, min(values), max(values)]
        print(f"{arm:<9}{len(values):>4}" + "".join(f"{c * 1e3:>7.0f} ms" for c in cells))
    print()
    for a, b in (("spread3", "one3"), ("spread3", "raw×3"), ("one3", "raw×3")):
        if a in medians and b in medians:
            print(f"{a} ÷ {b}: {medians[a] / medians[b]:.2f}×")


def run(image: str, runs: int, warmup: int, settle: float) -> None:
    """Bring up the engines, measure, report, tear down."""
    if missing := engines_harness.missing_tools():
        sys.exit(f"the multi-node arm needs {', '.join(missing)} (and root)")
    print(f"multi-node arm: bringing up three engines in a Swarm ({image})", file=sys.stderr)
    samples: dict[str, list[float]] = {}
    with engines_harness.running(image) as engines, tempfile.TemporaryDirectory() as tmp:
        samples = asyncio.run(_measure(engines, image, Path(tmp), runs, warmup, settle))
    _report(samples)
