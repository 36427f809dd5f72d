"""Session start-up time (create → RUNNING) against the same containers started by hand.

Run: ``.venv/bin/python bench/cluster_start.py [--runs N]`` (needs a Docker engine
and the default kernel image: ``bai-jupyter image build``).

Arms, interleaved round by round so they share the machine's noise
(``size1, raw×1, floor×1, size2, raw×2, floor×2, size4, raw×4, floor×4`` × N):

* ``size1`` / ``size2`` / ``size4``: an interactive session of that cluster size
  (per kernel ``cpu 0.5, mem 256m``, single-node, default image) on the docker
  backend, timed from ``BaiSessionManager.create`` until ``wait_for`` returns
  RUNNING: main1's ipykernel listens and every other kernel's sshd does. One
  manager with a fresh SQLite store in a temporary directory; its start is not
  timed.
* ``raw×N``, the baseline (``bench/raw_kernels.py``): the same N containers
  started by hand through the Docker SDK, at once, with the same image and the
  same CPU, memory and pids limits, on a user-defined bridge (made for the sample
  when N > 1, as a session's own bridge is), main1 running ipykernel and the
  others sshd, timed until the same ports accept a connection from this host;
* ``floor×N``, a reference: N ``sleep`` containers without limits started at
  once on the default bridge, timed until the last start returns: the engine's
  own time for N containers, under any kernel's start.

Every sample is removed after it is timed, outside the timed part, and the
engine is given ``--settle`` seconds before the next one. One untimed warm-up
round comes first. Prints median, p90, min and max per arm, each session arm's
ratio to its ``raw×N`` baseline against the goals (size 1 ≤ 1.2×, sizes 2 and 4
≤ 1.25×), and its ratio to the floor.

``--multi-node`` runs the multi-node arm instead (``bench/multinode_start.py``):
a size-3 session spread over three engines in a Swarm against a size-3 session
on one engine and three raw containers started at once on the three engines
(needs root: the engines run in network namespaces of their own).

Everything the bench starts is removed on exit, Ctrl-C and SIGTERM included:
the sessions through the manager, then (should any remain) every container and
network labelled with one of the bench's session ids or with its run id.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import docker.errors
from docker.client import DockerClient

from bai_jupyter.kernel_plan import LABEL_ROOT, LABEL_SESSION
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.model import Session, Status

sys.path.insert(0, str(Path(__file__).resolve().parent))
from raw_kernels import RawKernels  # a module beside this script

#: The SDK has no type hints: its objects are held as ``Any`` (as in agents/docker/).
_SDKClient: Any = DockerClient

SIZES = (1, 2, 4)
#: Goals: cluster size → largest allowed median ratio to the same containers by hand.
GOALS = {1: 1.2, 2: 1.25, 4: 1.25}
#: Label of the floor containers, valued with this run's id.
BENCH_LABEL = "bai-jupyter-bench.run"
OWNER = "bench"
RESOURCES = {"cpu": "0.5", "mem": "256m"}
START_TIMEOUT = 120.0


def session_arm(size: int) -> str:
    return f"size{size}"


def raw_arm(size: int) -> str:
    return f"raw×{size}"


def floor_arm(size: int) -> str:
    return f"floor×{size}"


@dataclass
class Bench:
    """What one run started (for clean-up) and what it measured."""

    image: str
    client: Any
    raw: RawKernels
    run_id: str
    manager: BaiSessionManager | None = None
    sessions: list[str] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)
    #: Size → phase → seconds of each sample (``_phases``).
    phases: dict[int, dict[str, list[float]]] = field(default_factory=dict)

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
    created_at = time.time()
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
        phases = await asyncio.to_thread(_phases, bench, session, created_at)
        for name, seconds in phases.items():
            bench.phases.setdefault(size, {}).setdefault(name, []).append(seconds)
    finally:
        await manager.destroy(session.id)
    return elapsed


def _stamp(text: str) -> float:
    """An engine timestamp (RFC 3339, nanoseconds) as epoch seconds."""
    day, _, rest = text.rstrip("Z").partition("T")
    clock, _, fraction = rest.partition(".")
    whole = datetime.fromisoformat(f"{day}T{clock}+00:00").timestamp()
    return whole + float(f"0.{fraction or 0}")


def _phases(bench: Bench, session: Session, created_at: float) -> dict[str, float]:
    """Where a session's start went, from its status history and main1's container: the
    manager's part until it asks the engine, the engine's create and start, the runtime's
    set-up until the ipykernel starts, the kernel's boot, and the ready line's way back."""
    at = {entry.status: entry.at for entry in session.status_history}
    main = session.main
    info = bench.client.api.inspect_container(main.container_id)
    started = _stamp(info["State"]["StartedAt"])
    logs = bench.client.api.logs(main.container_id, timestamps=True).decode(errors="replace")
    lines = {
        marker: _stamp(line.split(" ", 1)[0])
        for line in logs.splitlines()
        for marker in ("kernel started", "bai-runtime: ready")
        if marker in line
    }
    return {
        "create→CREATING (manager: admission, pass, plans, images)": at[Status.CREATING]
        - created_at,
        "CREATING→container started (engine: networks, create, start)": started
        - at[Status.CREATING],
        "→ ipykernel spawned (runtime set-up)": lines["kernel started"] - started,
        "→ ready line (ipykernel boot, sshd)": lines["bai-runtime: ready"]
        - lines["kernel started"],
        "→ RUNNING (ready seen, recorded)": at[Status.RUNNING] - lines["bai-runtime: ready"],
    }


def _floor_one(bench: Bench) -> str:
    container = bench.client.containers.run(
        bench.image,
        ["sleep", "600"],
        detach=True,
        init=True,
        labels={BENCH_LABEL: bench.run_id},
    )
    return str(container.id)


def _floor(bench: Bench, count: int) -> tuple[float, list[str]]:
    """``count`` bare starts at once, each in its own thread; timed until the last returns."""
    with ThreadPoolExecutor(count) as pool:
        start = time.perf_counter()
        futures = [pool.submit(_floor_one, bench) for _ in range(count)]
        wait(futures)
        elapsed = time.perf_counter() - start
    cids = [f.result() for f in futures if f.exception() is None]
    for cid in cids:
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            bench.client.api.remove_container(cid, force=True)
    for f in futures:
        f.result()  # the first failure, now that every container is removed
    return elapsed, cids


async def sample(bench: Bench, arm: str) -> float:
    if arm.startswith("floor×"):
        seconds, _ = await asyncio.to_thread(_floor, bench, int(arm.removeprefix("floor×")))
        return seconds
    if arm.startswith("raw×"):
        started = await asyncio.to_thread(bench.raw.start, int(arm.removeprefix("raw×")), RESOURCES)
        await asyncio.to_thread(bench.raw.remove, started)
        return started.seconds
    return await start_session(bench, int(arm.removeprefix("size")))


# --- the run -----------------------------------------------------------------------------


def order() -> list[str]:
    """One round: each session size, its baseline, and the engine's floor."""
    return [arm for n in SIZES for arm in (session_arm(n), raw_arm(n), floor_arm(n))]


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
    removed += bench.raw.sweep()
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
    print(
        f"{'arm':<9}{'n':>4}{'median':>10}{'p90':>10}{'min':>10}{'max':>10}"
        f"{'÷ raw×N':>10}{'÷ floor×N':>11}"
    )
    for size in SIZES:
        for arm in (session_arm(size), raw_arm(size), floor_arm(size)):
            values = bench.samples.get(arm)
            if not values:
                continue
            cells = [statistics.median(values), p90(values), min(values), max(values)]
            ratios = [
                f"{medians[arm] / medians[base]:>9.2f}×" if base in medians else f"{'':>10}"
                for base in (raw_arm(size), floor_arm(size))
            ]
            print(
                f"{arm:<9}{len(values):>4}"
                + "".join(f"{c * 1e3:>7.0f} ms" for c in cells)
                + ratios[0]
                + " "
                + ratios[1]
            )
    print()
    for size, goal in GOALS.items():
        arm, base = session_arm(size), raw_arm(size)
        if arm in medians and base in medians:
            ratio = medians[arm] / medians[base]
            verdict = "met" if ratio <= goal else "NOT met"
            print(
                f"goal: size {size} ≤ {goal}× the same {size} container(s) by hand "
                f"({medians[base] * 1e3:.0f} ms): {ratio:.2f}× → {verdict}"
            )
    for size, phases in sorted(bench.phases.items()):
        print(f"\nsize {size}, where the time goes (medians):")
        for name, values in phases.items():
            print(f"  {statistics.median(values) * 1e3:7.0f} ms  {name}")


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
    run_id = uuid.uuid4().hex[:12]
    tmp_root = Path(tempfile.mkdtemp(prefix="bai-bench-"))
    bench = Bench(
        image=image, client=client, raw=RawKernels(client, image, run_id, tmp_root), run_id=run_id
    )
    print(
        f"bench run {bench.run_id}: image {image}, {args.runs} runs (+{args.warmup} warm-up), "
        f"per kernel cpu {RESOURCES['cpu']} mem {RESOURCES['mem']}, "
        f"pass_interval {BaiSessionManager().pass_interval:g} s",
        file=sys.stderr,
    )
    interrupted, failure = False, None
    try:
        asyncio.run(run_bench(bench, tmp_root, args.runs, args.warmup, args.settle))
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
        shutil.rmtree(tmp_root, ignore_errors=True)
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
