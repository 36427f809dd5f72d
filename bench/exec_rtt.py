"""Round trip of a trivial execute: a bai kernel (main1 of a session) against a local ipykernel.

Run: ``.venv/bin/python bench/exec_rtt.py [--runs N] [--per-run M]`` (needs a
Docker engine and the default kernel image).

Both kernels are started once (a local ipykernel through jupyter_client's
``AsyncKernelManager``; a ``bai`` kernel of cluster size 1 with an in-process
manager on a fresh store), then, ``N`` runs of ``M`` executes each, alternating
kernel run by run so they share the machine's noise, each ``pass`` is timed from
sending ``execute_request`` to receiving its ``execute_reply`` on the shell
channel. The ZMQ messages go straight to the ipykernel in main1 (no proxy in the
path), so the difference is the container's network hop. Prints median and p99
per kernel, the ratio, and the goal (bai ≤ 1.1× local).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from bai_jupyter import kernelspecs
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.registry import register_manager, unregister_manager

GOAL = 1.1


async def round_trips(client: AsyncKernelClient, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        msg_id = client.execute("pass", store_history=False)
        while True:
            reply = await client.get_shell_msg(timeout=10)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        times.append(time.perf_counter() - started)
    return times


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


async def main(runs: int, per_run: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "kernels" / "bai").mkdir(parents=True)
        spec = kernelspecs.kernelspec_json("bai", {"cluster_size": 1})
        (root / "kernels" / "bai" / "kernel.json").write_text(json.dumps(spec))
        manager = BaiSessionManager(store_url=f"sqlite:///{root}/store.sqlite", backend="docker")
        await manager.start()
        register_manager(manager)
        managers = {
            "local": AsyncKernelManager(kernel_name="python3"),
            "bai": AsyncKernelManager(
                kernel_name="bai",
                kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(root / "kernels")]),
            ),
        }
        clients: dict[str, AsyncKernelClient] = {}
        times: dict[str, list[float]] = {name: [] for name in managers}
        try:
            for name, km in managers.items():
                await km.start_kernel()
                clients[name] = km.client()
                clients[name].start_channels()
                await clients[name].wait_for_ready(timeout=60)
                await round_trips(clients[name], 50)  # warm-up
            for _ in range(runs):
                for name, client in clients.items():
                    times[name] += await round_trips(client, per_run)
        finally:
            for name, km in managers.items():
                if name in clients:
                    clients[name].stop_channels()
                await km.shutdown_kernel(now=True)
            unregister_manager(manager)
            await manager.stop()
    print(f"execute 'pass' → execute_reply, {runs} runs × {per_run} per kernel (ms)")
    print(f"{'kernel':7} {'median':>8} {'p99':>8}")
    for name, samples in times.items():
        print(f"{name:7} {statistics.median(samples) * 1e3:8.3f} {p99(samples) * 1e3:8.3f}")
    median_ratio = statistics.median(times["bai"]) / statistics.median(times["local"])
    p99_ratio = p99(times["bai"]) / p99(times["local"])
    ok = median_ratio <= GOAL
    print(f"bai / local: median {median_ratio:.2f}×, p99 {p99_ratio:.2f}×")
    print(f"goal median ≤ {GOAL}× local: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per kernel (default 10)")
    parser.add_argument("--per-run", type=int, default=100, help="executes per run (default 100)")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.runs, args.per_run)))
