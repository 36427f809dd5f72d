"""Session start-up time (create → RUNNING) against starting the same image by hand.

Run: ``.venv/bin/python bench/cluster_start.py [--runs N]`` (needs a Docker engine
and the default kernel image: ``bai-jupyter image build``).

Arms, interleaved round by round so they share the machine's noise
(``size1, cli, sdk, size2, cli, sdk, sdk×2, size4, cli, sdk, sdk×4`` × N):

* ``size1`` / ``size2`` / ``size4``: an interactive session of that cluster size
  (per kernel ``cpu 0.5, mem 256m``, single-node, default image) on the docker
  backend, timed from ``BaiSessionManager.create`` until ``wait_for`` returns
  RUNNING (which includes the manager's wait for each kernel's runtime to report
  ready). One manager with a fresh SQLite store in a temporary directory and the
  default ``pass_interval``; its start is not timed.
* baseline A, ``raw-cli``: ``docker run -d --init --rm IMAGE sleep 600``, timed
  until the command returns (the container is created and started);
* baseline B, ``raw-sdk``: the docker SDK's ``containers.run(..., detach=True)``
  with the same options, so the baseline does not carry the CLI's own start-up;
* reference ``raw-sdk×N`` (not a goal baseline): N such SDK starts at once, the
  engine's own time for N containers, i.e. the floor under a size-N session.

Every sample is removed after it is timed, outside the timed part, and the
engine is given ``--settle`` seconds before the next one. One untimed warm-up
sample of each arm comes first (the shared egress network, caches). Prints
median, p90, min and max per arm, the ratio of each median to both baselines,
the goals (size 1 ≤ 1.2×, size 4 ≤ 1.6× the raw container), and each size-N
median over the ``raw-sdk×N`` floor.

``--multi-node`` runs the multi-node arm instead (``bench/multinode_start.py``):
a size-3 session spread over three engines in a Swarm against a size-3 session
on one engine and three raw containers started at once on the three engines
(needs root: the engines run in network namespaces of their own).

Everything the bench starts is removed on exit, Ctrl-C and SIGTERM included:
the sessions through the manager, then (should any remain) every container and
network labelled with one of the bench's session ids, and the raw containers by
their bench label.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors
from docker.client import DockerClient

from bai_jupyter.kernel_plan import LABEL_ROOT, LABEL_SESSION
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.model import Status

#: The SDK has no type hints: its objects are held as ``Any`` (as in agents/docker.py).
_SDKClient: Any = DockerClient

SIZES = (1, 2, 4)
#: Goals from the issue: cluster size → largest allowed median ratio to a raw container.
GOALS = {1: 1.2, 4: 1.6}
#: Label of the raw (baseline) containers, valued with this run's id.
BENCH_LABEL = "bai-jupyter-bench.run"
OWNER = "bench"
RESOURCES = {"cpu": "0.5", "mem": "256m"}
START_TIMEOUT = 120.0


def session_arm(size: int) -> str:
    return f"size{size}"


RAW_ARMS = ("raw-cli", "raw-sdk")
PARALLEL_PREFIX = "raw-sdk×"


def parallel_arm(size: int) -> str:
    """The floor for a size-N session: N raw containers started at once through the SDK."""
    return f"{PARALLEL_PREFIX}{size}"


@dataclass
class Bench:
    """What one run started (for clean-up) and what it measured."""

    image: str
    client: Any
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    manager: BaiSessionManager | None = None
    sessions: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)

    def record(self, arm: str, seconds: float) -> None:
        self.samples.setdefault(arm, []).append(seconds)


# --- the arms ----------------------------------------------------------------------------


async def start_session(bench: Bench, size: int) -> float:
    """Seconds from ``create`` to ``wait_for`` returning RUNNING; the session is then removed."""
    manager = bench.manager
    assert manager is not None
    request = {
        "type": "interactive",
        "cluster_size": size,
        "cluster_mode": "single-node",
        "resources": dict(RESOURCES),
    }
    start = time.perf_counter()
    session = await manager.create(request, OWNER)
    bench.sessions.append(session.id)
    session = await manager.wait_for(session.id, {Status.RUNNING}, timeout=START_TIMEOUT)
    elapsed = time.perf_counter() - start
    try:
        if session.status is not Status.RUNNING:
            raise RuntimeError(
                f"session of size {size} ended {session.status.value} "
                f"({session.status_info}): {session.status_data}"
            )
    finally:
        await manager.destroy(session.id)
    return elapsed


def _raw_cli(bench: Bench) -> tuple[float, str]:
    command = [
        "docker",
        "run",
        "-d",
        "--init",
        "--rm",
        "--label",
        f"{BENCH_LABEL}={bench.run_id}",
        bench.image,
        "sleep",
        "600",
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"docker run failed ({done.returncode}): {done.stderr.strip()}")
    return elapsed, done.stdout.strip()


def _raw_sdk(bench: Bench) -> tuple[float, str]:
    start = time.perf_counter()
    container = bench.client.containers.run(
        bench.image,
        ["sleep", "600"],
        detach=True,
        init=True,
        auto_remove=True,
        labels={BENCH_LABEL: bench.run_id},
    )
    elapsed = time.perf_counter() - start
    return elapsed, str(container.id)


def _remove_raw(client: Any, cid: str) -> None:
    """Force-remove a raw container and wait until it is gone (``--rm`` races with us)."""
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        client.api.remove_container(cid, force=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            client.api.inspect_container(cid)
        except docker.errors.NotFound:
            return
        time.sleep(0.05)


def _raw_sdk_parallel(bench: Bench, count: int) -> tuple[float, list[str]]:
    """``count`` SDK starts at once, each in its own thread; timed until the last returns."""
    with ThreadPoolExecutor(count) as pool:
        start = time.perf_counter()
        futures = [pool.submit(_raw_sdk, bench) for _ in range(count)]
        wait(futures)
        elapsed = time.perf_counter() - start
    cids = [f.result()[1] for f in futures if f.exception() is None]
    bench.raw.extend(cids)
    for f in futures:
        f.result()  # the first failure, now that every container is known
    return elapsed, cids


async def start_raw(bench: Bench, arm: str) -> float:
    """Seconds for a raw start (timed inside the worker thread); the containers are removed."""
    if arm.startswith(PARALLEL_PREFIX):
        known = len(bench.raw)
        try:
            elapsed, _ = await asyncio.to_thread(
                _raw_sdk_parallel, bench, int(arm.removeprefix(PARALLEL_PREFIX))
            )
        finally:
            started = bench.raw[known:]
            await asyncio.gather(
                *(asyncio.to_thread(_remove_raw, bench.client, cid) for cid in started)
            )
        return elapsed
    run: Callable[[Bench], tuple[float, str]] = _raw_cli if arm == "raw-cli" else _raw_sdk
    elapsed, cid = await asyncio.to_thread(run, bench)
    bench.raw.append(cid)
    await asyncio.to_thread(_remove_raw, bench.client, cid)
    return elapsed


async def sample(bench: Bench, arm: str) -> float:
    if arm.startswith("raw-"):
        return await start_raw(bench, arm)
    return await start_session(bench, int(arm.removeprefix("size")))


# --- the run -----------------------------------------------------------------------------


def order() -> list[str]:
    """One round: each session size followed by both baselines (and, for size N > 1,
    N raw containers started at once: what the engine alone needs for N kernels)."""
    arms: list[str] = []
    for size in SIZES:
        arms += [session_arm(size), *RAW_ARMS]
        if size > 1:
            arms.append(parallel_arm(size))
    return arms


async def measure(bench: Bench, runs: int, warmup: int, settle: float) -> None:
    rounds = [(False, i) for i in range(warmup)] + [(True, i) for i in range(runs)]
    for timed, i in rounds:
        line: list[str] = []
        for arm in order():
            seconds = await sample(bench, arm)
            if timed:
                bench.record(arm, seconds)
            line.append(f"{arm} {seconds * 1e3:.0f}")
            await asyncio.sleep(settle)
        what = f"run {i + 1}/{runs}" if timed else f"warm-up {i + 1}/{warmup}"
        print(f"{what}: " + ", ".join(line) + " ms", file=sys.stderr, flush=True)


async def run_bench(bench: Bench, root: Path, runs: int, warmup: int, settle: float) -> None:
    """Start the manager (untimed), measure, and remove every session it created."""
    bench.manager = BaiSessionManager(
        store_url=f"sqlite:///{root / 'store.sqlite'}",
        backend="docker",
        default_image=bench.image,
        data_folders_root=str(root / "folders"),
    )
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, task.cancel)
    try:
        await bench.manager.start()
        await measure(bench, runs, warmup, settle)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await asyncio.shield(shutdown(bench))


async def shutdown(bench: Bench) -> None:
    manager = bench.manager
    if manager is None:
        return
    # The store is the bench's own: every session in it is ours, including one whose
    # ``create`` was interrupted before it returned its id.
    with contextlib.suppress(Exception):
        for session in await manager.list_sessions():
            if session.id not in bench.sessions:
                bench.sessions.append(session.id)
    for session_id in bench.sessions:
        with contextlib.suppress(Exception):
            session = await manager.get(session_id)
            if not session.status.is_terminal:
                await asyncio.wait_for(manager.destroy(session_id), 60)
    with contextlib.suppress(Exception):
        await manager.stop()


def sweep(bench: Bench) -> int:
    """Remove whatever of this run is still on the engine; the number of things removed."""
    api = bench.client.api
    ours = set(bench.sessions)
    removed = 0
    leftovers = api.containers(all=True, filters={"label": LABEL_ROOT})
    leftovers = [c for c in leftovers if (c.get("Labels") or {}).get(LABEL_SESSION) in ours]
    leftovers += api.containers(all=True, filters={"label": f"{BENCH_LABEL}={bench.run_id}"})
    for container in leftovers:
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            api.remove_container(container["Id"], force=True, v=True)
            removed += 1
    for network in api.networks(filters={"label": LABEL_ROOT}):
        if (network.get("Labels") or {}).get(LABEL_SESSION) in ours:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                api.remove_network(network["Id"])
                removed += 1
    return removed


# --- the report --------------------------------------------------------------------------


def p90(values: list[float]) -> float:
    """Nearest-rank 90th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def report(bench: Bench) -> None:
    medians = {arm: statistics.median(v) for arm, v in bench.samples.items()}
    base = {arm: medians[arm] for arm in RAW_ARMS if arm in medians}
    print(
        f"{'arm':<9}{'n':>4}{'median':>10}{'p90':>10}{'min':>10}{'max':>10}"
        + "".join(f"{'÷ ' + arm:>12}" for arm in base)
    )
    rows = [*map(session_arm, SIZES), *RAW_ARMS, *(parallel_arm(n) for n in SIZES if n > 1)]
    for arm in rows:
        values = bench.samples.get(arm)
        if not values:
            continue
        cells = [statistics.median(values), p90(values), min(values), max(values)]
        print(
            f"{arm:<9}{len(values):>4}"
            + "".join(f"{c * 1e3:>7.0f} ms" for c in cells)
            + "".join(f"{medians[arm] / b:>11.2f}×" for b in base.values())
        )
    print()
    for size, goal in GOALS.items():
        arm = session_arm(size)
        if arm not in medians or not base:
            continue
        ratios = {name: medians[arm] / b for name, b in base.items()}
        met = [name for name, r in ratios.items() if r <= goal]
        verdict = (
            "met against both baselines"
            if len(met) == len(ratios)
            else (f"met only against {', '.join(met)}" if met else "NOT met")
        )
        shown = ", ".join(f"{r:.2f}× {name}" for name, r in ratios.items())
        print(f"goal: size {size} ≤ {goal}× the raw container: {shown} → {verdict}")
    for size in SIZES:
        arm, floor = session_arm(size), parallel_arm(size)
        if arm in medians and floor in medians:
            print(
                f"size {size} vs {size} raw containers started at once (SDK, "
                f"{medians[floor] * 1e3:.0f} ms, the engine's own floor): "
                f"{medians[arm] / medians[floor]:.2f}×"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed samples per session arm")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument(
        "--settle", type=float, default=0.5, help="seconds between samples (engine clean-up)"
    )
    parser.add_argument("--image", default=None, help="kernel image (default: the manager's)")
    parser.add_argument(
        "--multi-node",
        action="store_true",
        help="the multi-node arm: three engines in a Swarm (bench/multinode_start.py)",
    )
    args = parser.parse_args()
    if args.runs < 1 or args.warmup < 0 or args.settle < 0:
        parser.error("--runs must be ≥ 1, --warmup and --settle ≥ 0")
    image = args.image or BaiSessionManager().default_image
    if args.multi_node:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import multinode_start

        multinode_start.run(image, args.runs, args.warmup, args.settle)
        return
    try:
        client = _SDKClient.from_env(timeout=120)
        client.images.get(image)
    except docker.errors.ImageNotFound:
        sys.exit(f"image {image} is missing: build it with `bai-jupyter image build`")
    except docker.errors.DockerException as exc:
        sys.exit(f"no Docker engine answers: {exc}")
    bench = Bench(image=image, client=client)
    print(
        f"bench run {bench.run_id}: image {image}, {args.runs} runs (+{args.warmup} warm-up), "
        f"per kernel cpu {RESOURCES['cpu']} mem {RESOURCES['mem']}, "
        f"pass_interval {BaiSessionManager().pass_interval:g} s",
        file=sys.stderr,
    )
    interrupted, failure = False, None
    try:
        with tempfile.TemporaryDirectory(prefix="bai-bench-") as tmp:
            asyncio.run(run_bench(bench, Path(tmp), args.runs, args.warmup, args.settle))
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True
    except Exception as exc:  # report what was measured, then fail
        failure = exc
    finally:
        try:
            left = sweep(bench)
        except docker.errors.DockerException as exc:
            print(f"clean-up failed, look for label {BENCH_LABEL}: {exc}", file=sys.stderr)
        else:
            if left:
                print(f"removed {left} leftover containers/networks", file=sys.stderr)
        client.close()
    if interrupted or failure is not None:
        why = "interrupted" if failure is None else f"failed: {failure!r}"
        print(f"{why}; partial results", file=sys.stderr)
    if bench.samples:
        report(bench)
    if interrupted:
        sys.exit(130)
    if failure is not None:
        sys.exit(1)


if __name__ == "__main__":
    main()
