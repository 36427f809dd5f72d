"""Kernel start-up: start request → first ``execute_result``, bai against its baselines.

Run: ``.venv/bin/python bench/kernel_start.py [--runs N]`` (needs a Docker engine
and the default kernel image).

Arms, interleaved run by run so they share the machine's noise, each timed from
the start request until the ``execute_result`` of ``1+1`` arrives (after the
client's readiness check, ``wait_for_ready``, as every Jupyter front end does):

* ``local``: a local ipykernel through jupyter_client's ``AsyncKernelManager``;
* ``docker``: ``docker run`` (the SDK) of the kernel image running ipykernel on a
  bind-mounted connection file, reached at its bridge address like bai's main1;
* ``bai-1`` / ``bai-3``: ``AsyncKernelManager`` on a kernelspec of the ``bai``
  provisioner, cluster size 1 and 3, with an in-process manager (as the server
  extension registers it) on a fresh store.

The peer arm (gateway-provisioners' DockerProvisioner) is not here: it needs its
launcher baked into a derived image, which this bench does not build.
Prints median, min and max per arm, ratios to ``docker``, and the goals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from docker.client import DockerClient
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from bai_jupyter import kernelspecs
from bai_jupyter.manager import SessionManager
from bai_jupyter.registry import register_manager, unregister_manager

IMAGE = "bai-jupyter/python:3.11"
SMALL = {"cpu": "0.5", "mem": "512m"}
GOALS = {"bai-1": 1.25, "bai-3": 1.6}


async def first_result(client: AsyncKernelClient) -> None:
    """Wait for readiness, run ``1+1`` and return once its execute_result arrives."""
    await client.wait_for_ready(timeout=60)
    msg_id = client.execute("1+1")
    while True:
        msg = await client.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_result":
            return


async def via_kernel_manager(kernel_name: str, specs: KernelSpecManager) -> float:
    started = time.perf_counter()
    km = AsyncKernelManager(kernel_name=kernel_name, kernel_spec_manager=specs)
    await km.start_kernel()
    client = km.client()
    client.start_channels()
    await first_result(client)
    took = time.perf_counter() - started
    client.stop_channels()
    await km.shutdown_kernel(now=True)
    return took


async def via_docker_run(engine: Any, workdir: Path) -> float:
    ports = {f"{ch}_port": 2300 + i for i, ch in enumerate(("shell", "iopub", "stdin", "control"))}
    conn: dict[str, Any] = {
        **ports,
        "hb_port": 2304,
        "ip": "0.0.0.0",
        "key": secrets.token_hex(32),
        "transport": "tcp",
        "signature_scheme": "hmac-sha256",
    }
    folder = Path(tempfile.mkdtemp(dir=workdir))
    (folder / "kernel.json").write_text(json.dumps(conn))
    started = time.perf_counter()
    container = await asyncio.to_thread(
        engine.containers.run,
        IMAGE,
        ["python3", "-m", "ipykernel_launcher", "-f", "/conn/kernel.json"],
        detach=True,
        init=True,
        volumes={str(folder): {"bind": "/conn", "mode": "rw"}},
        labels={"bai-bench": "kernel_start"},
    )
    try:
        info = await asyncio.to_thread(engine.api.inspect_container, container.id)
        client = AsyncKernelClient()
        reach: Any = {**conn, "ip": info["NetworkSettings"]["IPAddress"]}
        client.load_connection_info(reach)
        client.start_channels()
        await first_result(client)
        took = time.perf_counter() - started
        client.stop_channels()
        return took
    finally:
        await asyncio.to_thread(container.remove, force=True)


async def main(runs: int) -> int:
    from_env: Any = DockerClient.from_env  # the SDK is untyped
    engine: Any = from_env()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        specs = KernelSpecManager(kernel_dirs=[str(root / "kernels")])
        for name, size in (("bai-1", 1), ("bai-3", 3)):
            config = {"cluster_size": size, "resources": SMALL}
            spec = kernelspecs.kernelspec_json(name, config)
            (root / "kernels" / name).mkdir(parents=True)
            (root / "kernels" / name / "kernel.json").write_text(json.dumps(spec))
        manager = SessionManager(store_url=f"sqlite:///{root}/store.sqlite", backend="docker")
        await manager.start()
        register_manager(manager)
        arms: dict[str, Callable[[], Awaitable[float]]] = {
            "local": lambda: via_kernel_manager("python3", KernelSpecManager()),
            "docker": lambda: via_docker_run(engine, root),
            "bai-1": lambda: via_kernel_manager("bai-1", specs),
            "bai-3": lambda: via_kernel_manager("bai-3", specs),
        }
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        try:
            for start in arms.values():  # warm-up, untimed
                await start()
            for _ in range(runs):
                for name, start in arms.items():
                    times[name].append(await start())
                    await asyncio.sleep(0.3)
        finally:
            unregister_manager(manager)
            for session in await manager.list():
                if not session.status.is_terminal:
                    await manager.destroy(session.id)
            await manager.stop()
    medians = {arm: statistics.median(t) for arm, t in times.items()}
    print(f"start → first execute_result, {runs} runs per arm (seconds)")
    print(f"{'arm':8} {'median':>7} {'min':>7} {'max':>7} {'×docker':>8}")
    for arm, samples in times.items():
        print(
            f"{arm:8} {medians[arm]:7.3f} {min(samples):7.3f} {max(samples):7.3f} "
            f"{medians[arm] / medians['docker']:8.2f}"
        )
    failed = 0
    for arm, goal in GOALS.items():
        ratio = medians[arm] / medians["docker"]
        ok = ratio <= goal
        failed += not ok
        print(f"goal {arm} ≤ {goal}× docker: {ratio:.2f}× {'PASS' if ok else 'FAIL'}")
    print("goal bai-1 faster than gateway-provisioners: NOT MEASURED (peer arm not built)")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per arm (default 5)")
    sys.exit(asyncio.run(main(parser.parse_args().runs)))
